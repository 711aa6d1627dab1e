"""The isolation layer every kernel evaluation runs through.

Kernels hang (an unsignalled DMA), segfault, exhaust memory or call os._exit, and interpret mode keeps
global state; so each evaluation runs in its own child process, in its own process group, with a
wall-clock timeout and a memory cap, and any of those endings becomes a `JobOutcome` instead of a
crash of the caller. Children fork from a multiprocessing forkserver that has jax preloaded (importing
jax starts no backend, so forking it is safe), which makes an evaluation cost ~0.3 s instead of ~1.5 s.

Memory cap: forked children get RLIMIT_AS = the cap (libtpu compile-only needs ~2.3 GB of address space
for a small Pallas compile and ran under a 3 GiB cap, so the cap does not break TPU compiles), plus a
parent-side resident-set watchdog over the whole process group. The device-owning worker gets only the
watchdog: on a real TPU host libtpu maps device memory into the address space, so RLIMIT_AS would
break it.

On a TPU host (`/dev/accel*` or `/dev/vfio/*`), jobs with `needs_device=True` go to one long-lived,
spawned worker that alone initialises the device backend, one job at a time; a hung job gets it killed
and restarted. Child side: `pool_child.py`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import glob
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing import spawn
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from maxkernel.tpu_tools import pool_child
from maxkernel.tpu_tools.pool_child import report_progress

__all__ = [
    "DEFAULT_PRELOAD",
    "JobHandle",
    "JobOutcome",
    "JobSpec",
    "WorkerPool",
    "default_memory_limit_bytes",
    "get_default_pool",
    "report_progress",
]

DEFAULT_PRELOAD = ("jax", "jax.numpy", "jax.experimental.pallas", "jax.experimental.pallas.tpu", "numpy")
GIB = 1 << 30
STDERR_TAIL_BYTES = 4096
WATCHDOG_INTERVAL_S = 0.5
DEVICE_WORKER_START_TIMEOUT_S = 300.0
# Children must not import jax-free: the pool module itself is preloaded so unpickling the target is free.
_CHILD_MODULES = ("maxkernel.tpu_tools.pool_child",)


def default_memory_limit_bytes() -> int:
    """16 GiB, or MAXKERNEL_MEMORY_LIMIT_BYTES when set."""
    raw = os.environ.get("MAXKERNEL_MEMORY_LIMIT_BYTES")
    return int(raw) if raw else 16 * GIB


class JobSpec(BaseModel):
    """One evaluation: a function imported and called in an isolated child."""

    model_config = ConfigDict(frozen=True)

    fn: str = Field(description="'package.module:function', imported in the child; returns a JSON-able dict")
    kwargs: dict = Field(default_factory=dict, description="JSON-able keyword arguments for fn")
    timeout_s: float = Field(default=120.0, gt=0, description="wall-clock limit; the process group is killed")
    memory_limit_bytes: int | None = Field(
        default_factory=default_memory_limit_bytes, description="address-space / resident cap; None = none"
    )
    needs_device: bool = Field(default=False, description="route to the device-owning worker on a TPU host")


Status = Literal["ok", "timeout", "crashed", "oom", "exited", "error", "cancelled"]


class JobOutcome(BaseModel):
    """How an evaluation ended. `message` is one precise line; `detail` holds traceback / stderr tail."""

    status: Status
    result: dict | None = None
    message: str
    detail: str = ""
    exit_code: int | None = None
    signal: str | None = None
    duration_s: float = 0.0
    progress: list[str] = Field(default_factory=list)


class JobHandle:
    """A submitted job: wait for it, cancel it, watch its progress. Safe to use from any thread."""

    def __init__(self, spec: JobSpec, on_progress: Callable[[str], None] | None) -> None:
        self.spec = spec
        self._on_progress = on_progress
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcome: JobOutcome | None = None
        self._progress: list[str] = []
        self._pgid: int | None = None  # set while a process runs this job
        self._cancelled = False
        self._started_at: float | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def progress(self) -> list[str]:
        with self._lock:
            return list(self._progress)

    def wait(self, timeout: float | None = None) -> JobOutcome | None:
        """The outcome, or None if `timeout` seconds pass first."""
        self._done.wait(timeout)
        return self._outcome

    def cancel(self) -> None:
        """Kill the job's whole process group (or drop it from the queue); its outcome is 'cancelled'."""
        with self._lock:
            if self._done.is_set():
                return
            self._cancelled = True
            pgid, started = self._pgid, self._started_at is not None
        if pgid is not None:
            _kill_group(pgid)
        elif not started:
            self._finish(JobOutcome(status="cancelled", message="cancelled before it started"))

    def _add_progress(self, stage: str) -> None:
        with self._lock:
            self._progress.append(stage)
        if self._on_progress is not None:
            try:
                self._on_progress(stage)
            except Exception:  # noqa: BLE001 - a caller's callback must not take down the runner
                pass

    def _finish(self, outcome: JobOutcome) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            outcome.progress = list(self._progress)
            self._outcome = outcome
            self._pgid = None
            self._done.set()
        return True


def _kill_group(pgid: int) -> None:
    """SIGKILL a job's process group (the child made itself its leader with setsid())."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_job(proc) -> None:
    """Kill a running job from its runner thread (the only thread that polls `proc`)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        # No such group: either it is over, or the child has not reached setsid() yet. Only the latter
        # may get a plain kill; once the child is reaped its pid could belong to someone else.
        if proc.exitcode is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    except PermissionError:
        pass


def _group_rss_bytes(pgid: int) -> int:
    """Resident set of every process in the group (the job and anything it started)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid:  # state, ppid, pgrp, ...
                total += int(fields[21]) * page  # rss in pages
        except (OSError, ValueError, IndexError):
            continue
    return total


def _read_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - STDERR_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def detect_device_owner() -> bool:
    """MAXKERNEL_DEVICE_OWNER=1|0 if set, else whether this host has TPU device files."""
    raw = os.environ.get("MAXKERNEL_DEVICE_OWNER")
    if raw is not None and raw.strip() != "":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/*"))


_start_lock = threading.Lock()  # multiprocessing.Process.start is not thread-safe (shared _children set)


@contextlib.contextmanager
def _starting_without_main():
    """Start processes without re-running the caller's __main__ in the child.

    multiprocessing re-imports the parent's main script in every spawned/forkserver child; for pytest,
    an MCP server or a benchmark script that is slow at best and re-runs the script at worst. Our
    targets live in pool_child, so the child never needs __main__.
    """
    original = spawn.get_preparation_data

    def without_main(name):
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _start_lock:
        spawn.get_preparation_data = without_main
        try:
            yield
        finally:
            spawn.get_preparation_data = original


class _Job:
    """What one running job needs while it is watched: its process, pipe and stderr file."""

    def __init__(self, handle: JobHandle, proc, conn, stderr_path: str) -> None:
        self.handle, self.proc, self.conn, self.stderr_path = handle, proc, conn, stderr_path
        self.clean_end = False  # the child reported a result itself (and, for the device worker, lives on)


class WorkerPool:
    """Runs `JobSpec`s in isolated children, at most `max_workers` at once (device jobs: one at a time)."""

    def __init__(
        self,
        max_workers: int = 2,
        *,
        preload=DEFAULT_PRELOAD,
        device_owner: bool | None = None,
        env: dict | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers should be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.preload = tuple(preload)
        self.device_owner = detect_device_owner() if device_owner is None else device_owner
        self._base_env = {"TPU_WORKER_HOSTNAMES": "localhost"}
        if self.device_owner:
            # Only the device worker may open the chip; other children compile-only / interpret on CPU.
            self._child_env = {**self._base_env, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "JAX_PLATFORMS": "cpu"}
        else:
            # Compile-only libtpu in several children at once needs the multi-process lock off.
            self._child_env = {**self._base_env, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
        self._child_env.update({str(k): str(v) for k, v in (env or {}).items()})
        self._device_env = {**self._base_env, **{str(k): str(v) for k, v in (env or {}).items()}}
        # The forkserver is one per process: the first pool's preload wins (multiprocessing's rule).
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload([*self.preload, *_CHILD_MODULES])
        self._cond = threading.Condition()
        self._queue: collections.deque[JobHandle] = collections.deque()
        self._running = 0
        self._closed = False
        self._live: set[JobHandle] = set()
        self._device_queue: collections.deque[JobHandle] = collections.deque()
        self._device_thread: threading.Thread | None = None
        self._device_proc = None
        self._device_conn = None
        self._device_stderr: str | None = None

    # ---- public API -------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, on_progress: Callable[[str], None] | None = None) -> JobHandle:
        """Queue a job; it starts as soon as a slot is free."""
        handle = JobHandle(spec, on_progress)
        with self._cond:
            if self._closed:
                raise RuntimeError("WorkerPool is closed: create a new one (or use get_default_pool())")
            if spec.needs_device and self.device_owner:
                self._device_queue.append(handle)
                if self._device_thread is None:
                    self._device_thread = threading.Thread(
                        target=self._device_loop, name="maxkernel-device-worker", daemon=True
                    )
                    self._device_thread.start()
                self._cond.notify_all()
            else:
                self._queue.append(handle)
                self._pump()
        return handle

    def run(self, spec: JobSpec, on_progress: Callable[[str], None] | None = None) -> JobOutcome:
        """Submit and wait."""
        outcome = self.submit(spec, on_progress).wait()
        assert outcome is not None
        return outcome

    def warm_up(self) -> None:
        """Start the forkserver now (it imports the preload list, ~1 s) instead of on the first job."""
        from multiprocessing import forkserver

        with _starting_without_main():
            forkserver.ensure_running()

    def close(self) -> None:
        """Kill every running job, cancel the queued ones, stop the device worker."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            queued = [*self._queue, *self._device_queue]
            self._queue.clear()
            self._device_queue.clear()
            live = list(self._live)
            self._cond.notify_all()
        for handle in queued:
            handle._finish(JobOutcome(status="cancelled", message="cancelled: pool closed before it started"))
        for handle in live:
            handle.cancel()
        # The device thread owns the worker (it alone polls it): wake it, let it reap the worker.
        proc = self._device_proc
        if proc is not None:
            _kill_group(proc.pid)
        if self._device_thread is not None:
            self._device_thread.join(10)
        with self._cond:  # runner threads finish within a moment of their group being killed
            self._cond.wait_for(lambda: self._running == 0, timeout=10)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- forked lane ------------------------------------------------------------------------------
    def _pump(self) -> None:
        """Start runner threads for queued jobs while slots are free (caller holds self._cond)."""
        while self._queue and self._running < self.max_workers and not self._closed:
            handle = self._queue.popleft()
            if handle.done:  # cancelled while queued
                continue
            self._running += 1
            self._live.add(handle)
            threading.Thread(
                target=self._run_forked, args=(handle,), name="maxkernel-job", daemon=True
            ).start()

    def _run_forked(self, handle: JobHandle) -> None:
        try:
            self._run_forked_inner(handle)
        except Exception as exc:  # noqa: BLE001 - the pool itself failed; say so instead of hanging wait()
            handle._finish(JobOutcome(status="error", message=f"pool failed to run the job: {exc!r}"))
        finally:
            with self._cond:
                self._running -= 1
                self._live.discard(handle)
                self._pump()
                self._cond.notify_all()

    def _run_forked_inner(self, handle: JobHandle) -> None:
        spec = handle.spec
        with handle._lock:
            if handle._cancelled:
                return
            handle._started_at = time.monotonic()
        fd, stderr_path = tempfile.mkstemp(prefix="maxkernel-job-", suffix=".log")
        os.close(fd)
        recv_conn, send_conn = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=pool_child.forked_main,
            args=(
                spec.fn,
                json.dumps(spec.kwargs),
                spec.memory_limit_bytes,
                self._child_env,
                list(sys.path),
                stderr_path,
                send_conn,
            ),
            name="maxkernel-job",
        )
        try:
            with _starting_without_main():
                proc.start()
            send_conn.close()
            with handle._lock:
                handle._pgid = proc.pid
                cancelled = handle._cancelled
            if cancelled:
                _kill_job(proc)
            job = _Job(handle, proc, recv_conn, stderr_path)
            outcome = self._watch(job, time.monotonic() + spec.timeout_s)
            _kill_group(proc.pid)  # whatever the job left behind in its group
            proc.join(5)
            handle._finish(outcome)
        finally:
            recv_conn.close()
            try:
                os.unlink(stderr_path)
            except OSError:
                pass

    # ---- watching one job -------------------------------------------------------------------------
    def _watch(self, job: _Job, deadline: float) -> JobOutcome:
        """Follow a running job until it ends, times out, is cancelled or exceeds memory."""
        handle, spec, proc = job.handle, job.handle.spec, job.proc
        t0 = handle._started_at or time.monotonic()
        next_check = time.monotonic() + WATCHDOG_INTERVAL_S
        conn_open = True

        def out(**kw) -> JobOutcome:
            return JobOutcome(duration_s=round(time.monotonic() - t0, 4), **kw)

        while True:
            now = time.monotonic()
            if handle._cancelled:
                _kill_job(proc)
                return out(status="cancelled", message="cancelled; process group killed")
            if now >= deadline:
                _kill_job(proc)
                return out(
                    status="timeout",
                    message=f"timed out after {spec.timeout_s:.1f} s; process group killed",
                    detail=_read_tail(job.stderr_path),
                )
            if now >= next_check:
                next_check = now + WATCHDOG_INTERVAL_S
                cap = spec.memory_limit_bytes
                if cap:
                    rss = _group_rss_bytes(proc.pid)
                    if rss > cap:
                        _kill_job(proc)
                        return out(
                            status="oom",
                            message=f"exceeded memory cap of {_gib(cap)} (resident set {_gib(rss)}); "
                            "process group killed",
                            detail=_read_tail(job.stderr_path),
                        )
            waitables = [proc.sentinel] + ([job.conn] if conn_open else [])
            ready = multiprocessing.connection.wait(waitables, timeout=min(deadline, next_check) - now)
            if conn_open and job.conn in ready:
                try:
                    message = job.conn.recv()
                except (EOFError, OSError):
                    conn_open = False
                    continue
                if message[0] == "progress":
                    handle._add_progress(message[1])
                    continue
                return self._terminal(message, job, out)
            if proc.sentinel in ready:
                # The process is gone; a terminal message may still sit in the pipe.
                while conn_open and job.conn.poll(0):
                    try:
                        message = job.conn.recv()
                    except (EOFError, OSError):
                        break
                    if message[0] == "progress":
                        handle._add_progress(message[1])
                    else:
                        return self._terminal(message, job, out)
                if handle._cancelled:
                    return out(status="cancelled", message="cancelled; process group killed")
                return self._died(job, out)

    def _terminal(self, message: tuple, job: _Job, out) -> JobOutcome:
        kind = message[0]
        job.clean_end = True
        if kind == "ok":
            return out(status="ok", result=json.loads(message[1]), message="ok")
        if kind == "exited":
            code_repr, code = message[1], message[2]
            return out(status="exited", message=f"called sys.exit({code_repr})", exit_code=code)
        _, type_name, text, tb = message
        first = (text.strip().splitlines() or [""])[0][:500]
        line = f"{type_name}: {first}" if first else type_name
        tail = _read_tail(job.stderr_path).strip()
        detail = tb + (f"\n--- stderr tail ---\n{tail}" if tail else "")
        if kind == "oom":
            cap = job.handle.spec.memory_limit_bytes
            what = f"exceeded memory cap of {_gib(cap)}" if cap else "ran out of host memory"
            return out(status="oom", message=f"{what} ({line})", detail=detail)
        return out(status="error", message=line, detail=detail)

    def _died(self, job: _Job, out) -> JobOutcome:
        """The process ended without a terminal message: a signal or os._exit."""
        job.proc.join(5)
        code = job.proc.exitcode
        tail = _read_tail(job.stderr_path)
        if code is not None and code < 0:
            name = _signal_name(-code)
            desc = (signal.strsignal(-code) or name).lower()
            if -code == signal.SIGKILL:
                desc += "; possibly the kernel OOM killer"
            return out(status="crashed", message=f"killed by {name} ({desc})", signal=name, detail=tail)
        return out(
            status="exited",
            message=f"exited with code {code} before returning a result (os._exit?)",
            exit_code=code,
            detail=tail,
        )

    # ---- device lane ------------------------------------------------------------------------------
    def _device_loop(self) -> None:
        while True:
            with self._cond:
                while not self._device_queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    break
                handle = self._device_queue.popleft()
                if handle.done:
                    continue
                self._live.add(handle)
            try:
                self._run_on_device_worker(handle)
            except Exception as exc:  # noqa: BLE001
                self._stop_device_worker()
                handle._finish(JobOutcome(status="error", message=f"device worker failed: {exc!r}"))
            finally:
                with self._cond:
                    self._live.discard(handle)
        self._stop_device_worker()

    def _ensure_device_worker(self) -> str | None:
        """Start the device worker if needed; returns an error line if it could not start."""
        if self._device_proc is not None and self._device_proc.is_alive():
            return None
        self._stop_device_worker()
        fd, self._device_stderr = tempfile.mkstemp(prefix="maxkernel-device-", suffix=".log")
        os.close(fd)
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: the only one to touch the device
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=pool_child.device_worker_main,
            args=(child_conn, self._device_env, list(sys.path), self._device_stderr, self.preload),
            name="maxkernel-device-worker",
        )
        with _starting_without_main():
            proc.start()
        child_conn.close()
        self._device_proc, self._device_conn = proc, parent_conn
        ready = multiprocessing.connection.wait(
            [parent_conn, proc.sentinel], timeout=DEVICE_WORKER_START_TIMEOUT_S
        )
        if parent_conn in ready:
            try:
                if parent_conn.recv() == ("ready",):
                    return None
            except (EOFError, OSError):
                pass
        tail = _read_tail(self._device_stderr)
        self._stop_device_worker()
        return f"device worker failed to start\n{tail}"

    def _stop_device_worker(self) -> None:
        proc, conn, path = self._device_proc, self._device_conn, self._device_stderr
        self._device_proc = self._device_conn = self._device_stderr = None
        if proc is not None:
            _kill_group(proc.pid)
            proc.join(5)
        if conn is not None:
            conn.close()
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _run_on_device_worker(self, handle: JobHandle) -> None:
        spec = handle.spec
        error = self._ensure_device_worker()
        if error is not None:
            handle._finish(JobOutcome(status="crashed", message=error.splitlines()[0], detail=error))
            return
        proc, conn = self._device_proc, self._device_conn
        with handle._lock:
            if handle._cancelled:
                return
            handle._started_at = time.monotonic()
            handle._pgid = proc.pid
        conn.send((spec.fn, json.dumps(spec.kwargs)))
        job = _Job(handle, proc, conn, self._device_stderr)
        outcome = self._watch(job, time.monotonic() + spec.timeout_s)
        if not job.clean_end:
            self._stop_device_worker()  # hung, killed or crashed: the next device job starts a fresh one
        handle._finish(outcome)


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()


def get_default_pool() -> WorkerPool:
    """The process-wide pool (created on first use, closed at exit)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = WorkerPool()
            atexit.register(_default_pool.close)
        return _default_pool
