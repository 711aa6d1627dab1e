"""The matmul_rows template: a matmul whose epilogue reduces over the whole output row, N tiled.

With N whole in one block, 42k (gelu(y - rowmax(y))) at full fit 512 rows, re-read the weight 8 times and
spilled its epilogue (2024 us, 0.39x XLA); 45k's GroupNorm kernel spilled 136 MiB; 40k's and 26k's did not
compile (a [M, N, 1, 1] value or a [1, N, M, 1] output on Mosaic's (8, 128) tiles). Here N is blocked, a
GroupNorm block keeps its groups whole, unit axes are squeezed out of the kernel, and a whole-row statistic
is one partial per column block, combined after the kernel. The interpret-mode cases below make N end in
a partial column block and span several, so a dropped partial shows.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.dims import Symbolic, program_at
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.rows import analyse
from maxkernel.clients.offline.templates import matmul_rows
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
MAX_GELU = "42k_Gemm_Max_Subtract_GELU"  # a row max, then elementwise on [M, N]
GN_MIN = "40k_Gemm_GroupNorm_Min_BiasAdd"  # GroupNorm (groups of 16), a row min, a [1, N, M, 1] outer sum
GN_SWISH = "45k_Gemm_GroupNorm_Swish_Multiply_Swish"  # GroupNorm (groups of 32), elementwise: one pass
UNIT_NORM = "26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply"  # InstanceNorm over [M, N, 1, 1]
# two row blocks, three column blocks (the last past N: 320 = 2 x 128 + 64), two k-steps
SMALL = {"block_rows": 32, "block_cols": 128, "block_k": 256}


def _template(task: str):
    """The matmul_rows template of `task` (42k's route keeps N whole: see the routing test)."""
    program = describe(task).model_dump(mode="json")
    if task == MAX_GELU:
        sym = Symbolic(program)
        template = matmul_rows.build(program, analyse(program_at(program, sym.target)), sym)
        assert template is not None and sym.target == "full"
        return template
    template, target, _ = program_template(program)
    assert template.name == "matmul_rows" and target == "full"
    return template


def test_a_whole_output_row_epilogue_keeps_n_whole_and_a_reduced_one_tiles_it():
    """Where the output is the dot's whole [M, N] and nothing is reshaped (42k, 50k), one kernel with N whole
    beats N tiled plus a second pass over y (llo at full, v6e: 42k 762 vs 841 us, 50k 774 vs 858); a reduced
    output (36k) or GroupNorm's reshape (45k) tiles N."""
    for task, want in (
        (MAX_GELU, "matmul"),
        ("50k_Matmul_GELU_Softmax", "matmul"),
        ("36k_Matmul_Sigmoid_Sum", "matmul_rows"),
        (GN_SWISH, "matmul_rows"),
    ):
        template, _, _ = program_template(describe(task).model_dump(mode="json"))
        assert template.name == want, task


def _run(tmp_path: Path, name: str, source: str, inputs) -> np.ndarray:
    mod = written(tmp_path / f"{name}.py", source)
    with execution.tpu_interpret_mode():
        return np.asarray(jax.jit(mod.workload)(*inputs), dtype=np.float32)


def _reference(task: str):
    spec = importlib.util.spec_from_file_location(task, TASKS / f"{task}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_whole_row_epilogues_tile_n_and_keep_groups_whole():
    for task, n, group in (
        (MAX_GELU, 8192, 1),
        (GN_MIN, 8192, 16),
        (GN_SWISH, 8192, 32),
        (UNIT_NORM, 8192, 1),
    ):
        t = _template(task)
        bn = t.initial["block_cols"]
        assert bn < n and bn % group == 0 and bn % 128 == 0, (task, t.initial)
        assert t.vmem_bytes(t.initial, {}) <= 48 * 2**20
    source = _template(MAX_GELU).render(_template(MAX_GELU).initial, "program")
    assert "v4 = jnp.max(v4_parts, axis=0)" in source  # the row max combined over column blocks
    # one pass where no statistic spans the row; the unit axes never reach the kernel
    assert "return out[0]" in _template(GN_SWISH).render(_template(GN_SWISH).initial, "program")
    unit = _template(UNIT_NORM).render(_template(UNIT_NORM).initial, "program")
    epilogue = unit[unit.index("def _epilogue") : unit.index("def _kernel")]
    assert "v5 = lax.reshape(v4, (b0, sh[1][1]))" in epilogue and ", 1, 1)" not in epilogue


@pytest.mark.slow  # an interpret run at a check size (9-18 s): `make test-slow`
def test_a_row_max_over_column_blocks_matches_and_a_dropped_partial_fails(tmp_path):
    ref = _reference(MAX_GELU)
    kx, kw, kb = jax.random.split(jax.random.key(5), 3)
    x = jax.random.uniform(kx, (64, 512), jnp.float32).astype(jnp.bfloat16)
    w = (0.05 * jax.random.normal(kw, (512, 320))).astype(jnp.bfloat16)
    b = (0.05 * jax.random.normal(kb, (320,))).astype(jnp.bfloat16)
    want = np.asarray(jax.jit(ref.workload)(x, w, b), dtype=np.float32)
    source = _template(MAX_GELU).render(SMALL, "program")
    got = _run(tmp_path, "good", source, (x, w, b))
    np.testing.assert_allclose(got, want, atol=2e-3, rtol=2e-2)
    # the last column block's partial maxima left out: rows whose max lies there are shifted
    dropped = source.replace("jnp.max(v4_parts, axis=0)", "jnp.max(v4_parts[:-1], axis=0)")
    assert dropped != source
    assert np.abs(_run(tmp_path, "dropped", dropped, (x, w, b)) - want).max() > 0.02


def test_groupnorm_then_a_row_min_into_an_outer_sum_matches_and_a_dropped_partial_fails(tmp_path):
    ref = _reference(GN_MIN)
    ks = jax.random.split(jax.random.key(7), 4)
    x = jax.random.uniform(ks[0], (64, 512), jnp.float32).astype(jnp.bfloat16)
    w = (0.05 * jax.random.normal(ks[1], (320, 512))).astype(jnp.bfloat16)  # [out, in]: 20 groups of 16
    lin = (0.05 * jax.random.normal(ks[2], (320,))).astype(jnp.bfloat16)
    bias = (0.05 * jax.random.normal(ks[3], (1, 320, 1, 1))).astype(jnp.bfloat16)
    inputs = (x, w, lin, jnp.ones((320,), jnp.bfloat16), jnp.zeros((320,), jnp.bfloat16), bias)
    want = np.asarray(jax.jit(ref.workload)(*inputs), dtype=np.float32)
    source = _template(GN_MIN).render(SMALL, "program")
    got = _run(tmp_path, "good", source, inputs)
    assert got.shape == want.shape == (1, 320, 64, 1)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)
    # the last column block's partial minima left out: rows whose minimum lies there move
    dropped = source.replace("jnp.min(v36_parts, axis=0)", "jnp.min(v36_parts[:-1], axis=0)")
    assert dropped != source
    worse = _run(tmp_path, "dropped", dropped, inputs)
    assert np.abs(worse - want).max() > 0.1 > 2 * np.abs(got - want).max()


@pytest.mark.slow  # two Mosaic compiles at full (40k's alone ~25 s on 2 cores)
@pytest.mark.parametrize("task", [GN_MIN, UNIT_NORM])
def test_first_kernels_that_did_not_compile_compile_at_full(task, tmp_path):
    t = _template(task)
    target = parse_target("tpu-v6e")
    sharding = execution.aot_sharding(target)
    ref = _reference(task)
    full = [
        jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in jax.eval_shape(ref.create_inputs)
    ]
    mod = written(tmp_path / "first.py", t.render(t.initial, "program"))
    with trace_as_target(target):
        assert jax.jit(mod.workload).lower(*full).compile() is not None


@pytest.mark.slow  # a compile at full or an interpret run at a check size: `make test-slow`
def test_a_residual_fetched_halfway_through_the_k_steps_matches_and_one_a_block_late_fails(tmp_path):
    """26k's [M, N] input y is read on the last k-step only: its block is fetched halfway through the block's
    k-steps (the block before it until then), so its DMA and the previous output block's writeback fall on
    different steps (llo at full, tpu-v6e: 729.5 -> 712.4 us, XLA 735.9). Two row blocks, three column
    blocks (the last past N), four k-steps: a map still on the block before at the last k-step fails."""
    ref = _reference(UNIT_NORM)
    ks = jax.random.split(jax.random.key(11), 5)
    x = jax.random.uniform(ks[0], (64, 1024), jnp.float32).astype(jnp.bfloat16)
    y = jax.random.uniform(ks[1], (64, 320), jnp.float32).astype(jnp.bfloat16)
    w = (0.02 * jax.random.normal(ks[2], (320, 1024))).astype(jnp.bfloat16)
    bmm_bias, in_bias = ((0.5 * jax.random.normal(k, (320,))).astype(jnp.bfloat16) for k in ks[3:])
    inputs = (x, y, w, bmm_bias, jnp.ones((320,), jnp.bfloat16), in_bias)
    want = np.asarray(jax.jit(ref.workload)(*inputs), dtype=np.float32)
    source = _template(UNIT_NORM).render(SMALL, "program")
    assert "(k < nk // 2)" in source
    np.testing.assert_allclose(_run(tmp_path, "good", source, inputs), want, atol=2e-2, rtol=2e-2)
    late = source.replace("(k < nk // 2)", "(k < nk)")
    late_out = _run(tmp_path, "late", late, inputs)  # each block with the block before's y (or NaN)
    assert not np.allclose(late_out, want, atol=2e-2, rtol=2e-2)
