"""A matmul whose epilogue sums its result over the rows (train-mode BatchNorm) gets a k-tiled matmul and
passes over its result, not one block holding the whole [M, N] result.

31k (x [16384, 8192] @ W^T, BatchNorm over the batch with the variance centred on the rounded mean)
had fallen to the fused template's single block. The kernel is checked in TPU interpret mode with
every row and column block partial against the task's reference, and two adversaries (a row block's
part of the mean or of the variance dropped) must fail the same check. An epilogue that keeps columns
apart but reads a one-element input (48k's bias of shape (1,)) keeps its columns blocked.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates import matmul_colstats
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.problem.program import describe

from .test_cross_entropy import _module

TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
BN_TASK = TASKS / "31k_Gemm_BatchNorm_GELU_ReLU.py"
# every axis of kernel 1 and of the passes ends in a partial block (200 rows, 384 columns); K 1024 in two steps
SMALL_BLOCKS = {"block_rows": 64, "block_cols": 256, "block_k": 512, "pass_rows": 64, "pass_cols": 256}


def _program(path: Path) -> dict:
    return describe(str(path)).model_dump(mode="json")


@pytest.fixture(scope="module")
def bn_program():
    return _program(BN_TASK)


def _partial_inputs(ref):
    """The task's small inputs at 200 rows, K 1024 and 384 columns (N past one 256-column block)."""
    x, w, b, g, beta = ref.create_inputs(size="small", key=7)
    x = jax.random.uniform(jax.random.key(3), (200, 1024), x.dtype)
    grow = [jnp.concatenate([a, a[:128]], 0) for a in (w[:, :1024], b)]
    # a scale and shift that are not 1 and 0, so a dropped input would show
    n = grow[1].shape[0]
    g = jax.random.uniform(jax.random.key(4), (n,), g.dtype, 0.5, 1.5)
    beta = jax.random.normal(jax.random.key(5), (n,), beta.dtype) * 0.1
    return (x, *grow, g, beta)


def test_31k_gets_the_colstats_template_with_blocks_that_fit(bn_program):
    template, target, _ = program_template(bn_program)
    assert template.name == "matmul_colstats" and target == "full"
    c = template.initial
    # compute-bound tiles (the weight streams 16 times, not once per 8-row block) within the first VMEM rule
    assert c["block_rows"] >= 512 and c["block_cols"] >= 512 and c["block_k"] >= 1024
    assert template.vmem_bytes(c, {}) <= 48 << 20
    # the sums accumulate across row blocks: a check size grown to 2048 rows must see two of them
    assert c["block_rows"] <= 1024 and c["pass_rows"] <= 1024
    source = template.render(c, "program")
    # the mean in kernel 1, the variance (centred on the rounded mean) in a pass, the output in the last
    assert "N_STATS = (1, 1)" in source and "PASSES = (_pass1, _pass2)" in source


def test_an_epilogue_without_a_sum_over_the_rows_is_left_to_the_other_templates():
    for task in ("43k_Gemm_BatchNorm_Scaling_Softmax", "48k_Matmul_BatchNorm_BiasAdd_Divide_Swish"):
        program = _program(TASKS / f"{task}.py")
        assert matmul_colstats.build(program, Symbolic(program)) is None
    # 48k's one-element bias is the same in every column block: its columns stay blocked
    template, _, _ = program_template(_program(TASKS / "48k_Matmul_BatchNorm_BiasAdd_Divide_Swish.py"))
    assert template.name == "matmul" and "block_cols" in template.initial


@pytest.mark.parametrize(
    ("mutation", "passes"),
    [
        (None, True),
        # a row block's part of the mean overwrites the sum instead of adding to it
        (("            s_ref[...] += part", "            s_ref[...] = part"), False),
        # a row block's part of the variance does the same
        (("        o_ref[...] += v  # [bn] f32", "        o_ref[...] = v  # [bn] f32"), False),
    ],
)
def test_partial_blocks_match_the_reference_and_a_dropped_row_block_fails(
    bn_program, mutation, passes, tmp_path
):
    template = matmul_colstats.build(bn_program, Symbolic(bn_program))
    source = template.render(SMALL_BLOCKS, "program")
    if mutation is not None:
        assert mutation[0] in source
        source = source.replace(mutation[0], mutation[1])
    kernel = _module(tmp_path / "k.py", source)
    ref = _module(BN_TASK)
    inputs = _partial_inputs(ref)
    want = np.asarray(jax.jit(ref.workload)(*inputs)).astype(np.float32)
    with execution.tpu_interpret_mode():
        got = np.asarray(jax.jit(kernel.workload)(*inputs)).astype(np.float32)
    assert got.shape == want.shape == (200, 384)
    ok = np.allclose(got, want, rtol=2e-2, atol=2e-2)
    assert ok == passes, f"max error {np.abs(got - want).max()}"


@pytest.mark.slow  # the first kernel compiled at 31k's full size for tpu-v6e
def test_the_first_kernel_compiles_at_31k_full(bn_program, tmp_path):
    from maxkernel.clients.offline.first_kernel import first_kernel
    from maxkernel.tpu_tools.hardware.chips import get_chip
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.judged.target_trace import trace_as_target

    source = first_kernel(bn_program, get_chip("tpu-v6e"))
    assert "template=matmul_colstats" in source
    target = parse_target("tpu-v6e")
    sharding = execution.aot_sharding(target)
    task = _module(BN_TASK)
    full = [
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in jax.eval_shape(task.create_inputs)
    ]
    first = _module(tmp_path / "first.py", source)
    with trace_as_target(target):
        assert jax.jit(first.workload).lower(*full).compile() is not None


def test_every_pass_declares_its_vector_work(bn_program, tmp_path):
    """Each pass over y carries a pl.CostEstimate of its own elementwise work. Without one the estimator
    charged each pass a third of the program's matmul flops (total_flops / 3 calls), which floored 31k's
    whole estimate at the roofline of 1.67x the flops it computes: 3984 us at full where its kernels sum to
    3122 (llo, tpu-v6e)."""
    template = matmul_colstats.build(bn_program, Symbolic(bn_program))
    kernel = _module(tmp_path / "k.py", template.render(SMALL_BLOCKS, "program"))
    assert kernel.PASS_FLOPS == (7, 18) and kernel.PASS_TRANSCENDENTALS == (0, 1)  # the final pass's tanh
    inputs = _partial_inputs(_module(BN_TASK))
    with execution.tpu_interpret_mode():
        jaxpr = jax.make_jaxpr(kernel.workload)(*inputs)
    calls = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    estimates = [e.params["cost_estimate"] for e in calls]
    assert len(calls) == 3 and all(ce is not None for ce in estimates)
    matmul, *passes = estimates
    assert matmul.flops == 2 * 200 * 1024 * 384
    assert [ce.flops for ce in passes] == [7 * 200 * 384, 18 * 200 * 384]
    assert [ce.transcendentals for ce in passes] == [0, 200 * 384]
