"""The kernel program of a traced candidate (problem/kernel_program.py), compared across sizes.

Each size-dependent exploit (tests/kernels/adversarial/rms_*.py) wraps the same honest RMSNorm; traced at
12p's check sizes and at its target, each must differ there, and the honest one and the experts must not.
"""

import importlib.util
import sys

import jax
import jax.numpy as jnp
import pytest
from conftest_paths import KERNELS

from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.candidate import load_candidate
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.kernel_program import differences, kernel_program
from maxkernel.tpu_tools.problem.reference import load_reference

# 12p's small, the derived size seed 0 draws (4 x 256 = 1024 rows: no switch above 1024 crosses it), full
SHAPES = {"small": (2, 128, 1024), "derived": (4, 256, 2048), "full": (8, 4096, 8192)}


def _program(name: str, shape: tuple[int, ...]):
    sys.path.insert(0, str(KERNELS / "adversarial"))
    try:
        spec = importlib.util.spec_from_file_location(f"_kp_{name}", KERNELS / "adversarial" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    x = jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    return kernel_program(jax.make_jaxpr(module.workload)(x, jax.ShapeDtypeStruct(shape[-1:], jnp.bfloat16)))


def _differs(name: str) -> list[str]:
    full = _program(name, SHAPES["full"])
    return [
        d
        for size in ("small", "derived")
        for d in differences(full, _program(name, SHAPES[size]), "full", size)
    ]


def test_the_honest_rmsnorm_runs_one_program_at_every_size():
    assert _differs("rms_honest_rows") == []
    p = _program("rms_honest_rows", SHAPES["full"]).calls[0]
    assert p.dimension_semantics == ["parallel"] and p.coverage == [1.0] and p.grid == [128]
    assert {"get", "mul", "reduce_sum", "rsqrt", "swap"} <= set(p.ops)
    assert "reshape" not in p.ops and "broadcast_in_dim" not in p.ops  # layout only: size-dependent


def test_a_python_branch_on_a_static_shape_traces_another_body():
    found = _differs("rms_zeros_above_1024_rows")
    assert len(found) == 2 and all("only at small" in d or "only at derived" in d for d in found), found
    assert found[0].startswith("_kernel's body runs add, convert_element_type, div, get, mul")


def test_a_when_on_a_static_size_takes_another_branch():
    found = _differs("rms_when_static_rows")
    assert found and "cond#0[1]/swap only at full" in found[0], found
    assert "cond #0 takes branch 1 (a constant predicate) at full" in found[0]


def test_a_when_on_the_grid_position_reaches_a_branch_only_the_target_grid_reaches():
    found = _differs("rms_when_past_row_1024")
    assert found and "cond#1[1]/swap only at full" in found[0] and "over the grid" in found[0], found
    # told apart from a static difference: validate fails it only where a run at a size that reaches the
    # branch (the grown size) is wrong, as a reduction of one step at the check sizes reaches `k > 0` only
    # at the target
    full, small = (_program("rms_when_past_row_1024", SHAPES[n]) for n in ("full", "small"))
    assert full.calls[0].grid_conds == [0, 1] and not differences(
        full, small, "full", "small", over_grid=False
    )


def test_a_grid_capped_at_1024_rows_leaves_blocks_unwritten_at_the_target():
    found = _differs("rms_grid_capped_at_1024_rows")
    assert found == [
        "honest_kernel's grid writes 3.12% of output 0's blocks at full (grid (4,)), all of them at small",
        "honest_kernel's grid writes 3.12% of output 0's blocks at full (grid (4,)), all of them at derived",
    ]


@pytest.mark.parametrize("task", ["12p", "8p", "9p", "1p"])
def test_jaxbench_expert_references_run_their_target_program_at_a_check_size(task):
    """The expert Pallas references, traced as the chip at small, the derived size and the target."""
    from maxkernel.jaxbench import registry

    ref = load_reference(task)
    cand = load_candidate(str(registry.pallas_reference_path(registry.resolve_id(task))))
    names, _ = ref.default_check_sizes()
    programs = {}
    for n in [ref.default_size()[0], *names]:
        with trace_as_target(parse_target("tpu-v6e")):
            programs[n] = kernel_program(jax.make_jaxpr(cand.workload)(*ref.input_shapes(n)))
    target = programs.pop(ref.default_size()[0])
    assert any(not differences(target, p, "full", n) for n, p in programs.items())
