"""The worker pool turns hangs, crashes, OOMs and exits of a job into outcomes, and stays usable."""

from __future__ import annotations

import os
import threading
import time

import pydantic
import pytest

from maxkernel.tpu_tools.pool.workers import (
    GIB,
    JobOutcome,
    JobSpec,
    WorkerPool,
    default_memory_limit_bytes,
    get_default_pool,
    report_progress,
)

JOBS = "pool_jobs"  # tests/pool_jobs.py; tests/ is on sys.path (pytest rootdir-relative import)


def spec(name: str, **kw) -> JobSpec:
    kwargs = kw.pop("kwargs", {})
    return JobSpec(fn=f"{JOBS}:{name}", kwargs=kwargs, **kw)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(max_workers=2) as p:
        p.warm_up()
        yield p


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_ok_job_returns_result_and_progress(pool):
    seen: list[str] = []
    out = pool.run(spec("ok", kwargs={"x": 21}), on_progress=seen.append)
    assert out.status == "ok", out
    assert out.result["y"] == 42
    if out.sandbox.tier == "none":
        assert out.result["pgid"] == out.result["pid"]  # its own process group
    else:  # PID 2 of its own namespace, under init; its group's leader (the relay) lives outside it
        assert (out.result["pid"], out.result["pgid"]) == (2, 0)
    assert out.progress == ["started", "computed"] == seen
    assert out.result["pid"] != os.getpid()


def test_a_job_gets_its_own_cpu_device_count_and_the_next_one_the_default(pool):
    """A mesh kernel's child starts its backend with N CPU devices; the forkserver's jax never started one."""
    assert pool.run(spec("cpu_device_count", host_devices=4)).result == {"devices": 4}
    assert pool.run(spec("cpu_device_count")).result == {"devices": 1}


def test_hang_times_out_then_next_job_works(pool):
    t0 = time.monotonic()
    out = pool.run(spec("spin", timeout_s=1.5))
    assert time.monotonic() - t0 <= 1.5 + 2
    assert out.status == "timeout"
    assert out.message == "timed out after 1.5 s; process group killed"
    assert pool.run(spec("ok")).status == "ok"


def test_segfault_is_crashed_with_signal_and_stderr(pool):
    out = pool.run(spec("segfault"))
    assert out.status == "crashed"
    assert out.signal == "SIGSEGV"
    assert out.message == "killed by SIGSEGV (segmentation fault)"
    assert "about to segfault" in out.detail
    assert "Fatal Python error" in out.detail  # faulthandler's traceback


def test_huge_allocation_is_oom(pool):
    out = pool.run(spec("allocate", kwargs={"gigabytes": 30}, memory_limit_bytes=8 * GIB))
    assert out.status == "oom", out
    assert out.message.startswith("exceeded memory cap of 8.0 GiB (MemoryError: Unable to allocate 30.0 GiB")


def test_sys_exit_and_os_exit_are_exited(pool):
    out = pool.run(spec("exit_with", kwargs={"code": 3}))
    assert (out.status, out.message, out.exit_code) == ("exited", "called sys.exit(3)", 3)
    out = pool.run(spec("hard_exit", kwargs={"code": 4}))
    assert (out.status, out.exit_code) == ("exited", 4)
    assert out.message.startswith("exited with code 4 before returning a result")


def test_exception_is_error_with_type_and_traceback(pool):
    out = pool.run(spec("fail", kwargs={"text": "K=1000 should be divisible by block_k=256"}))
    assert out.status == "error"
    assert out.message == "ValueError: K=1000 should be divisible by block_k=256"
    assert "Traceback" in out.detail and "pool_jobs.py" in out.detail
    assert pool.run(spec("not_a_dict")).message.startswith(
        "TypeError: job pool_jobs:not_a_dict returned list"
    )
    assert pool.run(JobSpec(fn="no_such_module_xyz:f")).message.startswith("ModuleNotFoundError")


def host_pids_running(argv: list[str]) -> list[int]:
    """Live host pids whose command line is exactly `argv` (pids inside a sandbox are its own)."""
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() == want and not _gone(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_for_host_pids(argv: list[str], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while not (found := host_pids_running(argv)) and time.monotonic() < deadline:
        time.sleep(0.05)  # Popen returns before the child's exec
    return found


def test_cancel_kills_grandchild_too(pool):
    started = threading.Event()
    marker = f"300.{os.getpid()}{time.monotonic_ns() % 10**6}"
    handle = pool.submit(
        spec("spawn_grandchild", kwargs={"marker": marker}, timeout_s=60), on_progress=lambda s: started.set()
    )
    assert started.wait(30)
    grandchild = wait_for_host_pids(["sleep", marker])
    assert len(grandchild) == 1  # the host sees it while the job runs
    handle.cancel()
    out = handle.wait(10)
    assert out is not None and out.status == "cancelled"
    deadline = time.monotonic() + 5
    while not _gone(grandchild[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild[0])


def test_concurrency_is_bounded_and_thread_safe(pool):
    handles: list = []
    lock = threading.Lock()

    def submit():
        h = pool.submit(spec("sleep", kwargs={"seconds": 1.0}))
        with lock:
            handles.append(h)

    t0 = time.monotonic()
    threads = [threading.Thread(target=submit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [h.wait(30) for h in handles]
    elapsed = time.monotonic() - t0
    assert all(o is not None and o.status == "ok" for o in outs)
    spans = [(o.result["start"], o.result["end"]) for o in outs]
    most_at_once = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most_at_once == 2, spans
    assert 1.9 <= elapsed < 5.0, elapsed  # two waves of two (~2 s) plus fork overhead on a busy box


def test_cancel_queued_job():
    with WorkerPool(max_workers=1) as p:
        blocker = p.submit(spec("sleep", kwargs={"seconds": 1.0}))
        queued = p.submit(spec("ok"))
        queued.cancel()
        assert queued.wait(1).status == "cancelled"
        assert blocker.wait(30).status == "ok"


def test_small_jax_jit_in_child(pool):
    out = pool.run(spec("jax_jit"))
    assert out.status == "ok", out.detail
    assert out.result == {"sum": 56.0, "backend": "cpu"}


def test_libtpu_topology_compile_under_memory_cap(pool):
    # libtpu compile-only reserves ~2.3 GB of address space (measured); RLIMIT_AS = 4 GiB leaves room.
    out = pool.run(spec("tpu_compile", memory_limit_bytes=4 * GIB, timeout_s=120))
    assert out.status == "ok", out.detail
    assert out.result["device_kind"] == "TPU v6 lite"


def test_env_reaches_child_and_jax_config():
    with WorkerPool(max_workers=1, env={"JAX_PLATFORMS": "cpu", "MAXKERNEL_TEST_VAR": "7"}) as p:
        out = p.run(spec("env", kwargs={"names": ["TPU_WORKER_HOSTNAMES", "MAXKERNEL_TEST_VAR"]}))
    assert out.status == "ok", out.detail
    assert out.result == {
        "env": {"TPU_WORKER_HOSTNAMES": "localhost", "MAXKERNEL_TEST_VAR": "7"},
        "jax_platforms": "cpu",
    }


@pytest.mark.slow  # ~12 s: three device-worker starts (a spawned interpreter importing jax each)
def test_device_worker_is_reused_and_restarted_after_hang_or_memory_cap():
    with WorkerPool(max_workers=1, device_owner=True) as p:
        first = p.run(spec("ok", needs_device=True))
        second = p.run(spec("ok", needs_device=True))
        assert first.status == second.status == "ok"
        assert first.result["proc"] == second.result["proc"]  # one long-lived worker
        hung = p.run(spec("spin", needs_device=True, timeout_s=1.5))
        assert hung.status == "timeout"
        after = p.run(spec("ok", needs_device=True))
        assert after.status == "ok", after
        assert after.result["proc"] != first.result["proc"]  # restarted
        assert p.run(spec("fail", needs_device=True)).status == "error"
        assert p.run(spec("ok", needs_device=True)).result["proc"] == after.result["proc"]  # errors keep it
        # No RLIMIT_AS in the device worker (libtpu maps device memory there): the RSS watchdog caps it.
        big = spec("allocate_and_hold", kwargs={"gigabytes": 1.2}, needs_device=True, memory_limit_bytes=GIB)
        out = p.run(big)
        assert out.status == "oom", out
        assert out.message.startswith("exceeded memory cap of 1.0 GiB (resident set")
        assert p.run(spec("ok", needs_device=True)).status == "ok"


def test_spec_defaults_and_env_override(monkeypatch):
    assert JobSpec(fn="m:f").memory_limit_bytes == 16 * GIB
    monkeypatch.setenv("MAXKERNEL_MEMORY_LIMIT_BYTES", str(3 * GIB))
    assert default_memory_limit_bytes() == 3 * GIB
    assert JobSpec(fn="m:f").memory_limit_bytes == 3 * GIB
    with pytest.raises(pydantic.ValidationError):
        JobSpec(fn="m:f").timeout_s = 1  # frozen
    assert JobOutcome(status="ok", message="ok").progress == []


def test_closed_pool_refuses_jobs():
    p = WorkerPool(max_workers=1)
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.submit(spec("ok"))


def test_default_pool_is_one_per_process():
    pool = get_default_pool()
    assert pool is get_default_pool()
    assert pool.run(spec("ok")).status == "ok"
    report_progress("outside a pool child: a no-op")
