"""The k loop of the k-tiled matmul templates, as an expert writes it, and the cost that picks their blocks.

The accumulator starts as the first k-step's product (no zero fill: a select in the one branch that accumulates) and the last k-step runs the epilogue
in the branch of its own dot, where the scheduler overlaps its vector work with the MXU's: 35k at full on
tpu-v6e (llo) went 666 -> 640 us, the epilogue 830 bundles beside the last dot instead of 3635 after it.
The accumulator's load and store beside a large tile's MXU work are nearly free in the LLO (16616 bundles a
k step against the MXU's 16384 at 1024 x 2048 x 2048); counted as one vreg store a bundle, they made 31k and
26k take 1024 x 1024 tiles that stream the operands twice as often as 1024 x 2048 ones.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.tile_cost import accumulator_us, flops_us
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.problem.program import describe

TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
GELU = "35k_Gemm_Scaling_Hardtanh_GELU"  # matmul: x @ w + bias, scaling, hardtanh, GELU
BN = "31k_Gemm_BatchNorm_GELU_ReLU"  # matmul_colstats
UNIT_NORM = "26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply"  # matmul_rows
RAGGED = "14p_Ragged_Dot"  # batched_matmul


def _template(task: str):
    template, target, _ = program_template(describe(task).model_dump(mode="json"))
    assert target == "full"
    return template


@pytest.mark.parametrize(
    ("task", "name"),
    [(GELU, "matmul"), (BN, "matmul_colstats"), (UNIT_NORM, "matmul_rows"), (RAGGED, "batched_matmul")],
)
def test_no_zero_fill_and_the_last_dot_shares_the_epilogue_branch(task, name):
    t = _template(task)
    source = t.render(t.initial, "program")
    assert t.name == name
    assert "zeros_like(acc_ref)" not in source
    assert "jnp.zeros_like(acc), acc) + _part()" in source  # the first k-step: a select, not a zero fill
    assert "acc_ref[...] + _part()" in source  # the last: its dot and the epilogue in one branch
    assert "if nk == 1:" in source  # one k-step: no accumulator round trip


def _reference():
    spec = importlib.util.spec_from_file_location("ref35k", TASKS / f"{GELU}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path: Path, name: str, source: str, inputs) -> np.ndarray:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with execution.tpu_interpret_mode():
        return np.asarray(jax.jit(mod.workload)(*inputs), dtype=np.float32)


@pytest.mark.slow  # interpret-mode runs of the kernel (12-18 s on 2 cores): make test stays under 7 min
def test_one_two_and_three_k_steps_match_and_a_skipped_middle_step_fails(tmp_path):
    """K = 320: bk 512 is one k-step, 256 two (the last masked past K), 128 three (one middle step)."""
    ref = _reference()
    kx, kw, kb = jax.random.split(jax.random.key(3), 3)
    x = jax.random.uniform(kx, (64, 320), jnp.float32).astype(jnp.bfloat16)
    w = (0.2 * jax.random.normal(kw, (320, 256))).astype(jnp.bfloat16)
    b = (0.2 * jax.random.normal(kb, (256,))).astype(jnp.bfloat16)
    want = np.asarray(jax.jit(ref.workload)(x, w, b), dtype=np.float32)
    t = _template(GELU)
    for bk in (512, 256, 128):
        source = t.render({"block_rows": 32, "block_cols": 128, "block_k": bk}, "program")
        got = _run(tmp_path, f"k{bk}", source, (x, w, b))
        np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2, err_msg=f"bk={bk}")
    # the middle k-step's product dropped: only the first one accumulates
    skipped = source.replace("jnp.zeros_like(acc), acc) + _part()", "_part(), acc)")
    assert skipped != source
    assert np.abs(_run(tmp_path, "skipped", skipped, (x, w, b)) - want).max() > 0.1


def test_the_accumulator_is_a_small_share_of_a_large_tiles_k_step():
    # 35k's LLO: 16616 bundles a middle k step at 1024 x 2048 x 2048, the MXU's share 16384 (1.4% more)
    mxu = flops_us(1024, 2048, 2048, 1024, 2048, "narrow")
    assert 0.005 < accumulator_us(1, 1024, 2048) / mxu < 0.03


def test_first_blocks_stream_the_operands_less():
    """1024 x 2048 tiles read x 4 times and the weight 16 times at 31k's [16384, 8192] x [8192, 8192]; the
    1024 x 1024 ones taken before read x 8 times (memory-bound: 2.7 ms of HBM against 2.4 of MXU)."""
    bn = _template(BN).initial
    assert bn["block_rows"] * bn["block_cols"] == 1024 * 2048, bn
    assert bn["block_rows"] <= 1024  # the judge's check sizes repeat 1024-row blocks (rows_checkable)
    # 26k: llo at full, tpu-v6e: 1024 x 2048 x 1024 729.5 us, 1024 x 1024 x 2048 749.7
    rows = _template(UNIT_NORM).initial
    assert rows["block_rows"] * rows["block_cols"] == 1024 * 2048, rows


def test_two_k_steps_are_taken_where_every_check_size_steps_twice_too():
    """30k ([16384, 4096] @ [4096, 4096], K=4096 at small and derived too): 2048-deep k blocks run two k
    steps at every size the judge checks, so the accumulate path the target takes is validated; llo at
    full, tpu-v6e: 644.1 us (XLA 673.2) where the 1024-deep blocks it was held to took 681.2 (0.99x).
    Where a check size steps over K fewer times than the target (14p: 2048 of 4096), they stay refused."""
    from maxkernel.clients.offline.templates.batched_matmul import k_checkable

    assert _template("30k_Matmul_Scaling_ResidualAdd").initial["block_k"] == 2048
    assert k_checkable(2048, 4096, [4096, 4096]) and not k_checkable(2048, 4096, [2048])
    assert not k_checkable(1024, 3072, [2048])  # first, middle, last at the target; no middle at the check
    assert k_checkable(1024, 3072, [3072]) and k_checkable(1024, 4096, [])  # 4 steps: half K still has 2
