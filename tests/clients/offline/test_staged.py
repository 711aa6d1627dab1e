"""A program cut at its batched contraction: one kernel per stage in one module (clients/offline/stages.py,
templates/staged.py).

17p (AlphaFold's triangle update) is gated projections, `einsum("ikc,jkc->ijc")` of two of them, then a
norm and a projection: no row tiling holds the contraction with its neighbours, so one fused block held
everything (VMEM exhausted at full). Cut, the projections are one row-tiled kernel, the contraction a
batched matmul over c (its operands moved to [c, i, k] by the glue), the rest a row-tiled kernel again.
The layout moves are folded into the projection and norm kernels' BlockSpecs (fused.layout_of). The
adversary: a contraction with its operands swapped (T[j, i], the shapes agree: N x N) must fail the check.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.stages import cut
from maxkernel.clients.offline.templates.batched_matmul import recognise
from maxkernel.clients.offline.templates.fused import FOLDED
from maxkernel.jaxbench.registry import load_task
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

TASK = "17p_Triangle_Multiplication"
TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
BMM = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"g": 4, "m": 256}, "small": {"g": 2, "m": 64}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    x = jax.random.normal(jax.random.key(0), (s["g"], s["m"], 128)).astype(jnp.bfloat16)
    return x, x


def workload(x, y):
    return jnp.einsum("gmk,gnk->gmn", x, y)
"""


@pytest.fixture(scope="module")
def program() -> dict:
    return describe(str(TASKS / f"{TASK}.py")).model_dump(mode="json")


def test_17p_is_cut_into_projections_contraction_and_norm(program):
    stages = cut(program)
    assert [s.role for s in stages] == ["head", "pivot", "tail"]
    head, pivot, tail = stages
    assert "dot_general" in head.program["census"] and len(head.outputs) == 2  # the gated left and right
    # the contraction over k, batched over c: both operands moved to [c, rows, k]
    assert [m.perm for m in pivot.moves] == [(2, 0, 1), (2, 0, 1)]
    assert {m.src for m in pivot.moves} == set(head.outputs)
    # written with its operands swapped, so its output is [c, i, j]: the tail's rows i on a major axis
    right, left = pivot.moves  # the traced dot is dot_general(right, left)
    assert recognise(pivot.program) == {
        "lhs": left.out, "rhs": right.out, "nb": 1, "rhs_nk": True, "out_dtype": "bfloat16",
    }  # fmt: skip
    assert pivot.program["variants"]["full"]["inputs"][0]["shape"] == [128, 1536, 1536]
    # the tail opened with a transpose to [i, j, c]: a move, from [c, i, j] now
    assert [(m.src, m.perm) for m in tail.moves] == [(pivot.outputs[0], (1, 2, 0))]
    assert "transpose" not in tail.program["census"] and tail.outputs == tuple(program["outputs"])


def test_17p_moves_are_folded_into_the_projection_and_norm_kernels(program):
    """The head writes left and right as [c, i, k] and the tail reads [c, i, j] through its BlockSpecs:
    no transpose is left to XLA (each was ~1 ms by estimate at full, 43% of the module)."""
    template, _, _ = program_template(program)
    source = template.render(template.initial, "program")
    glue = source.split("def workload(", 1)[1]
    assert "jnp.transpose" not in glue and source.count(FOLDED) == 3
    assert "jnp.transpose(outs[0], (2, 0, 1))" in source  # the head writes [c, i, k]
    # the tail reads [c, i, j] as [i, j, c] by two cheap swaps, not one 3-D transpose (3x the time at full)
    assert 'jnp.swapaxes(pltpu.einshape("abc->bac", v11_ref[...]), 1, 2)' in source
    # a folded block's rows lie on the array's sublanes: a multiple of 16 bf16 rows
    assert min(template.tunables["block_s1_rows"]) == 16 and min(template.tunables["block_s3_rows"]) == 16


def test_a_batched_matmul_of_two_inputs_is_not_cut(tmp_path):
    path = tmp_path / "bmm_ref.py"
    path.write_text(BMM)
    assert cut(describe(str(path)).model_dump(mode="json")) is None


def test_a_cut_with_a_stage_that_is_one_block_too_is_not_taken():
    """6p (paged attention) has a batched contraction of gathered pages, but its head gathers from the
    whole cache: one untiled block either way, so the program keeps its own template."""
    program = describe(str(TASKS / "6p_Paged_Attention.py")).model_dump(mode="json")
    assert cut(program) is not None
    assert program_template(program)[0].name != "staged"


@pytest.mark.slow  # interpret-mode runs of the kernel (12-18 s on 2 cores): make test stays under 7 min
def test_17p_is_three_kernels_that_match_the_reference_and_swapped_operands_do_not(program, tmp_path):
    template, target, _ = program_template(program)
    assert template.name == "staged" and target == "full"
    assert {"block_s1_rows", "block_s2_m", "block_s3_rows"} <= set(template.tunables)
    source = template.render(template.initial, "program")
    assert source.count("pl.pallas_call(") == 3
    ref = load_task(TASK)
    ref.SIZES["check"] = {"N": 16, "C": 128}
    try:
        inputs = ref.create_inputs(size="check", key=3)
    finally:
        del ref.SIZES["check"]
    want = np.asarray(ref.workload(*[x.astype(np.float32) for x in inputs]), np.float32)
    call = next(ln for ln in source.splitlines() if "= s2_workload(" in ln)
    a, b = call.split("s2_workload(")[1].split(")")[0].split(", ")
    broken = source.replace(call, call.replace(f"({a}, {b})", f"({b}, {a})"))  # T[j, i], not T[i, j]
    assert broken != source
    errs = []
    for name, text in (("good", source), ("broken", broken)):
        kernel = written(tmp_path / f"{name}.py", text)
        with execution.tpu_interpret_mode():
            got = jax.jit(kernel.workload)(*inputs)
        assert got.shape == want.shape and got.dtype == inputs[0].dtype
        errs.append(float(np.abs(np.asarray(got, np.float32) - want).max()))
    # a bf16 result: within the task's tolerance of the f32 oracle; the wrong move is far outside it
    assert errs[0] <= 1e-2 * (1 + np.abs(want).max()) and errs[1] > 0.1


@pytest.mark.slow
def test_17p_first_kernel_compiles_at_full(program, tmp_path):
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert "template=staged" in source
    t = parse_target("tpu-v6e")
    sharding = execution.aot_sharding(t)
    ref = load_task(TASK)
    full = [
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in jax.eval_shape(ref.create_inputs)
    ]
    kernel = written(tmp_path / "first.py", source)
    with trace_as_target(t):
        text = jax.jit(kernel.workload).lower(*full).compile().as_text()
    assert "tpu_custom_call" in text or "custom-call" in text
