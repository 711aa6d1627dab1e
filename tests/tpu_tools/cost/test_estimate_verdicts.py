"""An estimate never outlives the compiler's verdict: a rejected compile is a failed estimate, and a config
the compiler accepts is never pruned by our own VMEM count."""

from __future__ import annotations

import pytest
from conftest_paths import MATMUL_REF, kernel

from maxkernel.tpu_tools.cli.main import _verdict_exit
from maxkernel.tpu_tools.cost.autotune import ConfigResult, _prune_by_estimate
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

MiB = 1 << 20


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=240)


def test_a_kernel_the_compiler_rejects_gets_no_estimate(evaluator):
    r = evaluator.estimate(kernel("vmem_1gib"), MATMUL_REF, "tpu-v5e", "small")
    assert not r.ok and r.estimate is None
    assert r.failure is not None and r.failure.kind == "vmem_exhausted", r.failure
    assert r.failure.stage == "compile" and r.failure.message  # the compiler's own words
    assert r.failure.requested_bytes and r.failure.requested_bytes > 128 * MiB
    assert _verdict_exit(r) == 1


def _res(compiled: bool, tier: str = "model") -> dict:
    est = {
        "estimated_time_us": 100.0,
        "bound": "compute",
        "tier": tier,
        "vmem_bytes_needed": 18 * MiB,  # our count: above v5e's 16 MiB default
        "vmem_capacity_bytes": 128 * MiB,
        "above_scoped_vmem_limit": True,
        "fits_vmem": True,
    }
    return {"ok": True, "estimate": est, "layout_problems": [], "compiled": compiled}


def test_a_config_the_compiler_accepts_at_18_mib_is_kept():
    r = ConfigResult(config={"bm": 512}, status="not_run")
    assert _prune_by_estimate(r, _res(compiled=True), can_raise=True) is None
    assert r.status != "pruned" and r.estimate_us == 100.0
    # Without a compile (no libtpu), our count is all there is: the config is retried with a raised limit.
    r2 = ConfigResult(config={"bm": 512}, status="not_run")
    assert _prune_by_estimate(r2, _res(compiled=False), can_raise=True) == 20 * MiB


def test_a_compiler_vmem_rejection_is_retried_raised_or_pruned():
    res = {
        "ok": False,
        "error": "rejected",
        "compile_error": "Scoped allocation with size 18.00M and limit 16.00M exceeded scoped vmem limit",
        "compiler_vmem_bytes": 18 * MiB,
        "compiler_vmem_limit": 16 * MiB,
        "vmem_capacity_bytes": 128 * MiB,
        "layout_problems": [],
    }
    r = ConfigResult(config={"bm": 512}, status="not_run")
    assert _prune_by_estimate(r, res, can_raise=True) == 20 * MiB
    r2 = ConfigResult(config={"bm": 512, "vmem_limit_bytes": 20 * MiB}, status="not_run")
    assert _prune_by_estimate(r2, res, can_raise=True) is None and r2.pruned_reason == "vmem"
