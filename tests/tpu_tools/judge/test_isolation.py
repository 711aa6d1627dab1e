"""A hang, segfault, 30 GB allocation or sys.exit in a candidate becomes a verdict; the next evaluation works."""

import time

import pytest
from conftest_paths import MATMUL_REF, kernel

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        pool.warm_up()
        yield Evaluator(pool, timeout_s=60)


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_hang_times_out_promptly_then_a_good_kernel_validates(evaluator):
    t0 = time.monotonic()
    r = evaluator.validate(
        kernel("hang"), MATMUL_REF, "cpu", "small", seeds=1, allow_plain_jax=True, timeout_s=5
    )
    elapsed = time.monotonic() - t0
    assert r.failure.kind == "timeout" and "5" in r.failure.summary
    assert elapsed <= 5 + 2
    ok = evaluator.validate(kernel("good_matmul"), MATMUL_REF, "cpu", "small", seeds=1)
    assert ok.ok, ok.failure


def test_segfault_is_a_crash_verdict(evaluator):
    r = evaluator.validate(kernel("segfault"), MATMUL_REF, "cpu", "small", seeds=1, allow_plain_jax=True)
    assert r.failure.kind == "crash" and "SIGSEGV" in r.failure.summary


def test_30gb_allocation_is_an_oom_verdict(evaluator):
    r = evaluator.validate(kernel("alloc_30gb"), MATMUL_REF, "cpu", "small", seeds=1, allow_plain_jax=True)
    assert r.failure.kind == "oom", r.failure


def test_sys_exit_is_an_exit_verdict(evaluator):
    r = evaluator.validate(kernel("exits"), MATMUL_REF, "cpu", "small", seeds=1, allow_plain_jax=True)
    assert r.failure.kind == "exited" and "3" in r.failure.summary


def test_compile_of_a_hanging_import_times_out(tmp_path, evaluator):
    bad = tmp_path / "hang_on_import.py"
    bad.write_text("while True:\n    pass\n")
    r = evaluator.compile(str(bad), MATMUL_REF, "tpu-v6e", "small", timeout_s=3)
    assert r.failure.kind == "timeout"
