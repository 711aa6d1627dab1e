"""A corpus of real kernels (tests/kernels/corpus/, sources in its README): jax's own shipped TPU ops,
tokamax's (the tokamax extra), kernels written the way LLM answers and blog posts publish them, and broken
variants of each real-world fault. Compile (real Mosaic, compile-only tpu-v6e, the production size) and
validate with default flags (compile at the production size, then TPU interpret mode at small, the
derived size and the shape-contract probe) run over every one and must give its expected verdict kind
("ok" for a pass; `interpret_unsupported` where jax's interpreter itself cannot run the kernel). In the same
run, the adversarial kernels that default validation exists to catch must keep failing."""

from __future__ import annotations

import importlib.util

import pytest
from conftest_paths import KERNELS, MATMUL_REF, PLUS_ONE_REF

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

CORPUS = KERNELS / "corpus"
slow = pytest.mark.slow
HAS_TOKAMAX = importlib.util.find_spec("tokamax") is not None


def ref(name: str) -> str:
    return MATMUL_REF if name == "matmul" else str(CORPUS / f"{name}_reference.py")


# kernel, reference, compile verdict at the production size, validate verdict with default flags
CASES = [
    ("jax_matmul", "matmul", "ok", "ok"),
    ("jax_flash_attention", "attention", "ok", "ok"),
    ("jax_megablox_gmm", "gmm", "ok", "ok"),
    ("jax_megablox_tgmm", "tgmm", "ok", "ok"),
    ("jax_paged_attention", "paged_attention", "ok", "ok"),
    # jax 0.10.2's interpreter: ReshapeTransform has no .indices (interpret/utils.to_range, in a callback)
    ("jax_ragged_paged_attention", "ragged_paged_attention", "ok", "interpret_unsupported"),
    # vmapped over the batch: runs with the semantics Mosaic gives the vmapped grid axis
    ("jax_splash_attention", "attention", "ok", "ok"),
    ("tokamax_flash_attention", "attention", "ok", "ok"),  # picks its blocks from the chip: traced as v6e
    ("tokamax_ragged_dot", "gmm", "ok", "ok"),
    ("llm_rmsnorm", "rmsnorm", "ok", "ok"),
    ("llm_colsum", "colsum", "ok", "ok"),
    ("traced_parallel_grid", "ragged_rows", "ok", "ok"),
    ("broken_traced_parallel_wrong", "ragged_rows", "ok", "output_mismatch"),
    ("broken_tiling_1x512", "tiling", "lowering_error", "lowering_error"),
    ("broken_float_iota", "column_position", "lowering_error", "lowering_error"),
    ("broken_vmem_overshoot", "rmsnorm", "vmem_exhausted", "vmem_exhausted"),
    ("broken_uninit_accumulator", "colsum", "ok", "output_mismatch"),
    ("broken_removed_api", "column_position", "python_error", "python_error"),
]
CHEAP_COMPILES = {"broken_tiling_1x512", "broken_float_iota", "broken_removed_api"}  # ~1 s: fail early


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=240)


def kind(report) -> str:
    return "ok" if report.ok else report.failure.kind


def _needs(name: str):
    return pytest.mark.skipif(name.startswith("tokamax") and not HAS_TOKAMAX, reason="no tokamax (the extra)")


@pytest.mark.parametrize(
    ("name", "reference", "expected"),
    [
        pytest.param(k, r, c, id=k, marks=(_needs(k),) if k in CHEAP_COMPILES else (slow, _needs(k)))
        for k, r, c, _ in CASES
    ],
)
def test_compile_verdict(evaluator, name, reference, expected):
    r = evaluator.compile(str(CORPUS / f"{name}.py"), ref(reference), "tpu-v6e", "full")
    assert kind(r) == expected, r.failure
    if r.failure is not None:
        assert r.failure.line is not None or r.failure.kind == "vmem_exhausted", r.failure  # at its line
        assert "file a bug" not in r.failure.summary


@pytest.mark.parametrize(
    ("name", "reference", "expected"),
    [pytest.param(k, r, v, id=k, marks=(slow, _needs(k))) for k, r, _, v in CASES],
)
def test_validate_verdict_with_default_flags(evaluator, name, reference, expected):
    # the production size is the target (validate compiles there first), then the default check sizes
    r = evaluator.validate(str(CORPUS / f"{name}.py"), ref(reference), "tpu-v6e", seeds=1)
    assert kind(r) == expected, r.failure and f"{r.failure!r}\n{r.failure.message[-4000:]}"
    if expected == "vmem_exhausted":  # it fits at the check sizes: the verdict keeps its kind, names them
        assert "small" in r.failure.sizes_passed and r.failure.sizes_failed == ["full"], r.failure
        assert r.failure.requested_bytes > r.failure.capacity_bytes
    if expected == "interpret_unsupported":  # names the jax function and what did run, exit 3 at the CLI
        assert "jax._src.pallas.mosaic.interpret" in r.failure.summary, r.failure
        assert "compile for tpu-v6e at 'full' passed" in r.failure.summary, r.failure
        assert not r.failure.summary.rstrip().endswith("(most recent call last):")
    if r.ok:
        assert r.has_pallas_call and r.per_seed and all(s.ok for s in r.per_seed)
        assert [c.size for c in r.checks if c.what == "validate"][:2] == ["small", "derived"], r.checks
        if name.startswith("tokamax") or name == "jax_splash_attention":
            assert "traced as the TPU v6 lite" in r.execution, r.execution


# adversarial kernels default validation must still catch in the same run: kernel, reference, verdict
ADVERSARIES = [
    ("hardcoded_small_shape", PLUS_ONE_REF, "shape_specialized"),
    ("zeros_above_rows", PLUS_ONE_REF, "shape_specialized"),
    ("right_for_three_calls", MATMUL_REF, "host_callback"),
    # their own failure dressed as jax's interpreter's: a forged frame, and jax's real code as their rule
    ("raises_as_interpreter", MATMUL_REF, "compile_error"),
    ("raises_through_interpreter", MATMUL_REF, "compile_error"),
    ("raises_in_kernel_body", MATMUL_REF, "python_error"),  # jax's real code, from its kernel body
]


@pytest.mark.parametrize(
    ("name", "reference", "expected"), [pytest.param(*a, id=a[0], marks=slow) for a in ADVERSARIES]
)
def test_adversaries_still_fail_with_default_flags(evaluator, name, reference, expected):
    r = evaluator.validate(str(KERNELS / "adversarial" / f"{name}.py"), reference, "tpu-v6e", seeds=1)
    assert kind(r) == expected, r.failure
