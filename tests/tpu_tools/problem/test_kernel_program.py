"""The kernel program of a traced candidate (problem/kernel_program.py), compared across sizes.

Each size-dependent exploit (tests/kernels/adversarial/rms_*.py) wraps the same honest RMSNorm; traced at
12p's check sizes and at its target, each must differ there, and the honest one and the experts must not.
"""

import functools
import importlib.util
import sys

import jax
import jax.numpy as jnp
import pytest
from conftest_paths import KERNELS

from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.candidate import load_candidate
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.kernel_program import differences, kernel_program, unvalidated
from maxkernel.tpu_tools.problem.reference import load_reference

# 12p's small, the derived size seed 0 draws (4 x 256 = 1024 rows: no switch above 1024 crosses it), full
SHAPES = {"small": (2, 128, 1024), "derived": (4, 256, 2048), "full": (8, 4096, 8192)}


@functools.lru_cache(maxsize=64)  # a program is not changed by its readers: trace each size once
def _program(name: str, shape: tuple[int, ...], fn: str = "workload"):
    sys.path.insert(0, str(KERNELS / "adversarial"))
    try:
        spec = importlib.util.spec_from_file_location(f"_kp_{name}", KERNELS / "adversarial" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    x = jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    return kernel_program(
        jax.make_jaxpr(getattr(module, fn))(x, jax.ShapeDtypeStruct(shape[-1:], jnp.bfloat16))
    )


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
        "honest_kernel's grid writes 3.12% of output 0's blocks (grid (4,)) at full, not at small",
        "honest_kernel's grid reads 3.12% of input 0's blocks (grid (4,)) at full, not at small",
        "honest_kernel's grid writes 3.12% of output 0's blocks (grid (4,)) at full, not at derived",
        "honest_kernel's grid reads 3.12% of input 0's blocks (grid (4,)) at full, not at derived",
    ]


@pytest.mark.parametrize("task", ["12p", "8p", "9p", "1p"])
def test_jaxbench_expert_references_run_their_target_program_at_a_check_size(task):
    """The expert Pallas references, traced as the chip at small, the derived size and the target."""
    from maxkernel.jaxbench import registry

    ref = load_reference(task)
    cand = load_candidate(str(registry.pallas_reference_path(registry.resolve_id(task))))
    names, _ = ref.default_check_sizes()
    derived = ref.derived_size()
    grown = (["grown"] if derived.grown_dims else []) + [f"grown:{k}" for k in derived.grown_alone]
    programs = {}
    for n in [ref.default_size()[0], *names, *grown]:
        with trace_as_target(parse_target("tpu-v6e")):
            programs[n] = kernel_program(jax.make_jaxpr(cand.workload)(*ref.input_shapes(n)))
    target = programs.pop(ref.default_size()[0])
    # a K-tiled matmul takes its `k > 0` branches only where K has more than one step: a grown size
    assert unvalidated(target, programs, "full")[0] == []


# ---- issue 43: what runs at the target, not which ops exist --------------------------------------------

GROWN_ROWS = (2, 4096, 1024)  # 12p's grown:seq_len (small with seq_len alone toward the target)
GROWN_EMB = (2, 128, 8192)  # 12p's grown:emb_dim


def _unvalidated(name: str, *grown: tuple[int, ...], fn: str = "workload") -> list[str]:
    checked = {n: _program(name, SHAPES[n], fn) for n in ("small", "derived")}
    checked |= {f"grown{i}": _program(name, s, fn) for i, s in enumerate(grown)}
    return unvalidated(_program(name, SHAPES["full"], fn), checked, "full")[0]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("rms_when_first_blocks_only", "_kernel takes cond#0[0] over the grid at full, at no validated size"),
        ("rms_abs_grid_predicate", "_kernel takes cond#0[1] over the grid at full, at no validated size"),
        ("rms_zeros_switch_in_nested_jit", "0 pallas_call(s) run at full, 1 at small"),
        (
            "rms_static_slice_mean",
            "_kernel's body loads 25% of input 0 dim 1 at load#0 at full, at no validated size",
        ),
        (
            "rms_clamped_index_map_big_grid",
            "_kernel's grid writes 12.5% of output 0's blocks (grid (4096, 224)) at full, at no "
            "validated size",
        ),
    ],
)
def test_what_only_the_target_runs_is_told_whatever_the_disguise(name, said):
    """Each is one program at every check size; at the target an empty branch, a predicate through abs, a
    switch inside a nested jit, a static slice or a clamped index map on a grid of 917,504 points leaves
    work undone. A size that reaches it (small with the rows or the row width grown) does what the target
    does, so the judge runs there (and the kernel is wrong there)."""
    assert said in _unvalidated(name)
    grown = GROWN_EMB if name == "rms_static_slice_mean" else GROWN_ROWS
    assert _unvalidated(name, grown) == []


def test_an_aliased_output_is_covered_too():
    found = _unvalidated("rms_clamped_index_map_big_grid", fn="aliased")
    assert any("writes 12.5% of output 0's blocks" in d for d in found), found


def test_the_honest_rmsnorm_needs_no_more_sizes():
    assert _unvalidated("rms_honest_rows") == []


def test_a_matmul_takes_its_k_branches_only_where_k_has_steps():
    """The init/store `pl.when`s of a K-tiled matmul take their empty branch only with two K steps or
    more; 8p's grown:K (M and N at small, K 8192) has them, and the name spelled with the shape is not
    the program."""
    sys.path.insert(0, str(KERNELS / "adversarial"))

    def prog(name, m, k, n):
        spec = importlib.util.spec_from_file_location(f"_kp_{name}", KERNELS / "adversarial" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        a, b = jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
        return kernel_program(jax.make_jaxpr(module.workload)(a, b))

    try:
        for name in ("gemm_named_by_shape_honest", "gemm_k_grid_capped"):
            full = prog(name, 8192, 8192, 28672)
            small = {"small": prog(name, 256, 256, 896)}
            left = unvalidated(full, small, "full")[0]
            assert any("takes cond#0[0] over the grid" in d for d in left), left
            grown_k = prog(name, 256, 8192, 896)
            after = unvalidated(full, small | {"grown:K": grown_k}, "full")[0]
            if name == "gemm_named_by_shape_honest":
                assert after == [] and full.calls[0].kernel != small["small"].calls[0].kernel
            else:  # its K grid stops at 1024: an eighth of the inputs' blocks, at grown:K too, where it is wrong
                assert "reads 12.5% of input 0's blocks" in " ".join(left)
                assert after == [] and grown_k.calls[0].read_coverage == [0.125, 0.125]
    finally:
        sys.path.pop(0)


def test_a_dma_into_an_hbm_output_is_followed_to_its_destination_rows():
    spec = importlib.util.spec_from_file_location(
        "_kp_any", KERNELS / "adversarial" / "any_output_clamped_dma.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def prog(rows):
        return kernel_program(jax.make_jaxpr(module.workload)(jax.ShapeDtypeStruct((rows, 128), jnp.float32)))

    full, small = prog(1024), prog(64)
    assert full.calls[0].coverage == [None]  # no index map: the DMA's slice is what tells
    assert unvalidated(full, {"small": small}, "full")[0] == [
        "_kernel's body stores 6.25% of output 0 dim 0 at run_scoped/store#0 at full, at no validated size"
    ]
    assert unvalidated(full, {"small": small, "grown": prog(256)}, "full")[0] == []  # partial there too
