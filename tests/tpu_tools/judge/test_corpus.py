"""A corpus of real kernels (tests/kernels/corpus/, sources in its README): jax's own shipped TPU ops,
kernels written the way LLM answers and blog posts publish them, and broken variants of each real-world
fault. Compile (real Mosaic, compile-only tpu-v6e, the production size) and validate (small size, TPU
interpret mode) run over every one and must give its expected verdict kind ("ok" for a pass)."""

from __future__ import annotations

import pytest
from conftest_paths import KERNELS, MATMUL_REF

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

CORPUS = KERNELS / "corpus"
slow = pytest.mark.slow


def ref(name: str) -> str:
    return MATMUL_REF if name == "matmul" else str(CORPUS / f"{name}_reference.py")


# kernel, reference, compile verdict at the production size, validate verdict at the small size
CASES = [
    ("jax_matmul", "matmul", "ok", "ok"),
    ("jax_flash_attention", "attention", "ok", "ok"),
    ("jax_megablox_gmm", "gmm", "ok", "ok"),
    ("jax_paged_attention", "paged_attention", "ok", "ok"),
    ("jax_splash_attention", "attention", "ok", "ok"),
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


@pytest.mark.parametrize(
    ("name", "reference", "expected"),
    [pytest.param(k, r, c, id=k, marks=() if k in CHEAP_COMPILES else slow) for k, r, c, _ in CASES],
)
def test_compile_verdict(evaluator, name, reference, expected):
    r = evaluator.compile(str(CORPUS / f"{name}.py"), ref(reference), "tpu-v6e", "full")
    assert kind(r) == expected, r.failure
    if r.failure is not None:
        assert r.failure.line is not None or r.failure.kind == "vmem_exhausted", r.failure  # at its line
        assert "file a bug" not in r.failure.summary


@pytest.mark.parametrize(
    ("name", "reference", "expected"),
    [pytest.param(k, r, v, id=k, marks=slow) for k, r, _, v in CASES],
)
def test_validate_verdict(evaluator, name, reference, expected):
    # the production size is the target (validate compiles there first), interpreted at small only
    r = evaluator.validate(
        str(CORPUS / f"{name}.py"), ref(reference), "tpu-v6e", seeds=1, check_sizes=["small"]
    )
    assert kind(r) == expected, r.failure
    if expected == "vmem_exhausted":  # it fits at small: the verdict keeps its kind and names the sizes
        assert r.failure.sizes_passed == ["small"] and r.failure.sizes_failed == ["full"], r.failure
        assert r.failure.requested_bytes > r.failure.capacity_bytes
    if r.ok:
        assert r.has_pallas_call and r.per_seed and all(s.ok for s in r.per_seed)
