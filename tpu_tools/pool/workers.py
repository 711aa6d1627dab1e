"""The isolation layer every kernel evaluation runs through.

Kernels hang (an unsignalled DMA), segfault, exhaust memory or call os._exit, and interpret mode keeps
global state; so each evaluation runs in its own child process, in its own process group, with a
wall-clock timeout and a memory cap, and any of those endings becomes a `JobOutcome` instead of a
crash of the caller. Children fork from a multiprocessing forkserver that has jax preloaded (importing
jax starts no backend, so forking it is safe), which makes an evaluation cost ~0.3 s instead of ~1.5 s.

Memory cap: forked children get RLIMIT_AS = the cap, plus a parent-side resident-set watchdog over the
whole process group (every 0.5 s; a /proc scan costs ~3 ms). Measured: a libtpu compile-only v6e Pallas
compile peaks at 2.3 GB virtual / 0.42 GB resident and works under a 3 GiB RLIMIT_AS, and a 30 GB numpy
allocation fails cleanly with MemoryError -> "oom". The device-owning worker gets only the watchdog: on
a real TPU host libtpu maps device memory into the address space (inferred; no TPU here to measure), so
an address-space cap could break it.

Every job runs in the OS sandbox this host allows (`sandbox.py`: bwrap, namespaces, or none, labeled on
every outcome): the forkserver itself is started sandboxed, and each forked job builds its own
namespaces at fork time (`sandbox_linux.py`): two more forks per job, not a fresh interpreter.

On a TPU host (`/dev/accel*` or `/dev/vfio/*`), jobs with `needs_device=True` go to one long-lived,
spawned worker that alone initialises the device backend, one job at a time; a hung job gets it killed
and restarted. Also here: `pool_types.py` (JobSpec, JobOutcome, JobHandle), `pool_watch.py` (one
child watched until it ends), `pool_child.py` (the child side).
"""

from __future__ import annotations

import atexit
import collections
import glob
import json
import multiprocessing
import multiprocessing.connection
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable

from maxkernel.tpu_tools.hardware.mesh import host_threads_env
from maxkernel.tpu_tools.pool import child as pool_child
from maxkernel.tpu_tools.pool import sandbox
from maxkernel.tpu_tools.pool.child import report_progress
from maxkernel.tpu_tools.pool.jobs import (
    GIB,
    JobHandle,
    JobOutcome,
    JobSpec,
    default_memory_limit_bytes,
    kill_group,
)
from maxkernel.tpu_tools.pool.watch import Job, kill_job, read_tail, starting_without_main, watch

__all__ = [
    "DEFAULT_PRELOAD",
    "GIB",
    "JobHandle",
    "JobOutcome",
    "JobSpec",
    "WorkerPool",
    "default_memory_limit_bytes",
    "detect_device_owner",
    "get_default_pool",
    "report_progress",
]

DEFAULT_PRELOAD = ("jax", "jax.numpy", "jax.experimental.pallas", "jax.experimental.pallas.tpu", "numpy")
DEVICE_WORKER_START_TIMEOUT_S = 300.0
# Preloaded too: unpickling a child's target, and a job's `from ...pool import report_progress`
# (pydantic, ~70 ms), then cost nothing.
# The evaluation jobs and the Pallas interpret/lowering machinery they use: importing them (no backend
# touched) once in the forkserver saves each evaluation ~0.1-0.2 s of imports and lazy set-up.
_CHILD_MODULES = (
    "maxkernel.tpu_tools.pool.sandbox_linux",
    "maxkernel.tpu_tools.pool.child",
    "maxkernel.tpu_tools.pool.workers",
    "jax._src.pallas.mosaic.interpret.interpret_pallas_call",
    "jax._src.pallas.mosaic.lowering",
    "maxkernel.tpu_tools.judged.compile",
    "maxkernel.tpu_tools.judge.validate",
    "maxkernel.tpu_tools.profile.run",
    "maxkernel.tpu_tools.cost.autotune",
)


def detect_device_owner() -> bool:
    """MAXKERNEL_DEVICE_OWNER=1|0 if set, else whether this host has TPU device files."""
    raw = os.environ.get("MAXKERNEL_DEVICE_OWNER")
    if raw is not None and raw.strip() != "":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/*"))


class WorkerPool:
    """Runs `JobSpec`s in isolated children, at most `max_workers` at once (device jobs: one at a time)."""

    def __init__(
        self,
        max_workers: int = 2,
        *,
        preload=DEFAULT_PRELOAD,
        device_owner: bool | None = None,
        env: dict | None = None,
        require_sandbox: bool | None = None,
        hide_paths: tuple[str, ...] | list[str] = (),
    ) -> None:
        """`require_sandbox` (default: MAXKERNEL_REQUIRE_SANDBOX=1) refuses a host without an OS sandbox.
        `hide_paths` are masked in every job (the server's token file), besides the home directory's
        credential stores (`sandbox.credential_paths()`) and each job's own."""
        if max_workers < 1:
            raise ValueError(f"max_workers should be >= 1, got {max_workers}")
        self.sandbox_decision = _process_decision()
        if require_sandbox is None:
            require_sandbox = sandbox.require_sandbox_requested()
        if require_sandbox and self.sandbox_decision.tier == "none":
            raise sandbox.SandboxUnavailable(
                f"refusing to run unsandboxed (--require-sandbox): {self.sandbox_decision.note}"
            )
        self.sandbox = sandbox.info_for(self.sandbox_decision, "forked")
        self.hide_paths = (*sandbox.credential_paths(), *(str(p) for p in hide_paths))
        self.device_sandbox = sandbox.info_for(self.sandbox_decision, "device")
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
        # A profile job without --trace-dir writes where this process looks (its HOME is its scratch).
        for child_env in (self._child_env, self._device_env):
            child_env.setdefault("MAXKERNEL_TRACE_DIR", _trace_root())
        # The forkserver is one per process: the first pool's preload wins (multiprocessing's rule).
        self._ctx = multiprocessing.get_context("forkserver")
        # sandbox_boot first: in the namespaces tier it unshares a user namespace, which needs one thread.
        self._ctx.set_forkserver_preload(
            ["maxkernel.tpu_tools.pool.sandbox_boot", *self.preload, *_CHILD_MODULES]
        )
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
        _all_pools.add(self)

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
        """Start the forkserver now and wait until it serves (it imports the preload list, ~1-3 s), by
        running one empty job through the sandbox; raises if even that fails."""
        self._ensure_forkserver()
        outcome = self.run(
            JobSpec(fn="maxkernel.tpu_tools.pool.child:noop_job", timeout_s=DEVICE_WORKER_START_TIMEOUT_S)
        )
        if outcome.status != "ok":
            raise RuntimeError(f"worker pool failed to start a job: {outcome.message}\n{outcome.detail}")

    def _ensure_forkserver(self) -> None:
        """Start (or find) the forkserver from the pool's one long-lived starter thread: the sandbox ties
        the forkserver's life to the thread that started it (PR_SET_PDEATHSIG), not to the process."""
        from multiprocessing import forkserver

        exe = _forkserver_executable(self.sandbox_decision.tier, self._child_env)

        def start() -> None:
            with starting_without_main(exe):
                forkserver.ensure_running()

        _starter.call(start)

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
            kill_group(proc.pid)
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
        fd, stderr_path = tempfile.mkstemp(prefix=f"maxkernel-job-{os.getpid()}-", suffix=".log")
        own_scratch = spec.scratch_dir is None
        scratch = sandbox.make_scratch_dir() if own_scratch else str(spec.scratch_dir)
        plan = None
        if self.sandbox_decision.tier != "none":
            cap = spec.memory_limit_bytes or default_memory_limit_bytes()
            plan = {
                "scratch": scratch,
                "hide": [*self.hide_paths, *spec.hide_paths],
                "tmp_size": min(cap, 4 * GIB),
                "inputs": _named_paths(spec.kwargs),
                "runtime": sandbox.runtime_paths(),
            }
        env = dict(self._child_env)
        if spec.host_devices > 1:  # the child's backend starts after fork: jax's own config sets the count
            env["JAX_NUM_CPU_DEVICES"] = str(spec.host_devices)
            env.update(host_threads_env(spec.host_devices, env))  # else interpret mode can deadlock
        recv_conn, send_conn = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=pool_child.forked_main,
            args=(
                spec.fn,
                json.dumps(spec.kwargs),
                spec.memory_limit_bytes,
                {**env, "HOME": scratch} if plan is None else env,
                list(sys.path),
                pool_child.InheritedFd(fd),
                send_conn,
                plan,
            ),
            name="maxkernel-job",
        )
        outcome = None
        exe = _forkserver_executable(self.sandbox_decision.tier, self._child_env)
        try:
            try:
                self._ensure_forkserver()
                with starting_without_main(exe):
                    proc.start()
            finally:
                send_conn.close()
                os.close(fd)
            with handle._lock:
                handle._pgid = proc.pid
                handle._sandboxed = plan is not None
                cancelled = handle._cancelled
            if cancelled:
                kill_job(proc, plan is not None)
            job = Job(handle, proc, recv_conn, stderr_path)
            job.sandboxed = plan is not None
            outcome = watch(job, time.monotonic() + spec.timeout_s)
            # Sandboxed, the relay ends only after everything in the job's PID namespace is gone: wait
            # for that (a job that reported and lingers gets killed), so the verdict comes after it.
            proc.join(2)
            if proc.exitcode is None:
                kill_job(proc, job.sandboxed)
                proc.join(5)
            kill_group(proc.pid)  # whatever the job left behind in its group
            proc.join(5)
        finally:
            # Clean up before waking the caller: a CLI may exit the moment wait() returns.
            recv_conn.close()
            try:
                os.unlink(stderr_path)
            except OSError:
                pass
            if own_scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        outcome.sandbox = self.sandbox
        handle._finish(outcome)

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
        fd, self._device_stderr = tempfile.mkstemp(prefix=f"maxkernel-device-{os.getpid()}-", suffix=".log")
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: the only one to touch the device
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        home = sandbox.make_scratch_dir("device-home-")
        proc = ctx.Process(
            target=pool_child.device_worker_main,
            args=(
                child_conn,
                self._device_env,
                list(sys.path),
                pool_child.InheritedFd(fd),
                self.preload,
                home,
            ),
            name="maxkernel-device-worker",
        )
        try:
            with starting_without_main(self._device_executable()):
                proc.start()
        finally:
            os.close(fd)
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
        tail = read_tail(self._device_stderr)
        self._stop_device_worker()
        return f"device worker failed to start\n{tail}"

    def _stop_device_worker(self) -> None:
        proc, conn, path = self._device_proc, self._device_conn, self._device_stderr
        self._device_proc = self._device_conn = self._device_stderr = None
        if proc is not None:
            kill_job(proc)  # bwrap tier: proc is bwrap itself; its sandbox dies with it
            proc.join(5)
        if conn is not None:
            conn.close()
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _device_executable(self) -> str | None:
        """The device worker's launcher: bwrap with the device nodes and libtpu's lock/logs bound in."""
        tier = self.sandbox_decision.tier
        env = {**sandbox.job_environment(os.environ), **self._device_env}
        if tier == "none":
            return None
        directory = _launcher_dir()
        if tier == "namespaces":
            return sandbox.write_launcher(sandbox.env_launcher_argv(env), directory)
        lock, logs = "/tmp/libtpu_lockfile", "/tmp/tpu_logs"
        if not os.path.exists(lock):
            open(lock, "a").close()
        os.makedirs(logs, exist_ok=True)
        writable, readable = self._device_writable(), sandbox.runtime_paths()
        argv = sandbox.device_bwrap_argv(
            sandbox.bwrap_path() or "bwrap",
            {**env, sandbox.ROLE_ENV: "device:bwrap"},
            sandbox.visible_cwd(os.getcwd(), [*writable, *readable]),
            uid=os.getuid(),
            writable=writable,
            readable=readable,
            devices=sandbox.device_paths(),
            libtpu_lock=lock,
            libtpu_logs=logs,
        )
        return sandbox.write_launcher(argv, directory)

    def _device_writable(self) -> list[str]:
        trace_root = self._device_env["MAXKERNEL_TRACE_DIR"]
        os.makedirs(trace_root, exist_ok=True)
        return [sandbox.scratch_root(), os.path.realpath(trace_root)]

    def _run_on_device_worker(self, handle: JobHandle) -> None:
        spec = handle.spec
        if spec.scratch_dir and self.sandbox_decision.tier == "bwrap":
            real = os.path.realpath(spec.scratch_dir)
            if not any(real == w or real.startswith(w + os.sep) for w in self._device_writable()):
                handle._finish(
                    JobOutcome(
                        status="error",
                        message=f"scratch_dir {spec.scratch_dir} is outside the device sandbox's writable "
                        f"roots ({', '.join(self._device_writable())}): make it with sandbox.make_scratch_dir()",
                        sandbox=self.device_sandbox,
                    )
                )
                return
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
        job = Job(handle, proc, conn, self._device_stderr)
        outcome = watch(job, time.monotonic() + spec.timeout_s)
        if not job.clean_end:
            self._stop_device_worker()  # hung, killed or crashed: the next device job starts a fresh one
        outcome.sandbox = self.device_sandbox
        handle._finish(outcome)


_decision: list[sandbox.Decision] = []
_decision_lock = threading.Lock()


def _process_decision() -> sandbox.Decision:
    """The tier of this process's one forkserver: chosen by the first pool, kept by every later one
    (a pool must never label, or plan for, a sandbox its forkserver was not started in)."""
    with _decision_lock:
        if not _decision:
            _decision.append(sandbox.detect())
        return _decision[0]


def _named_paths(value) -> list[str]:
    """Absolute paths of existing files the job's arguments name (a kernel under /tmp must stay visible
    to the job, read-only, when its /tmp is replaced)."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in _named_paths(v)]
    if isinstance(value, list | tuple):
        return [p for v in value for p in _named_paths(v)]
    if isinstance(value, str) and value.startswith("/") and len(value) < 4096 and os.path.exists(value):
        return [value]
    return []


def _trace_root() -> str:
    """profile.default_trace_root(), without importing profile (jax) into the parent."""
    return os.environ.get("MAXKERNEL_TRACE_DIR") or os.path.expanduser("~/.cache/maxkernel/traces")


class _Starter:
    """One long-lived thread that starts the sandboxed forkserver (its parent-death signal follows the
    thread that started it, and the pool's runner threads end after each job)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="maxkernel-sandbox-starter", daemon=True
                )
                self._thread.start()
        done, box = threading.Event(), {}
        self._queue.put((fn, done, box))
        done.wait()
        if "error" in box:
            raise box["error"]

    def _loop(self) -> None:
        while True:
            fn, done, box = self._queue.get()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box["error"] = e
            done.set()


_starter = _Starter()
_launchers: dict[str, str | None] = {}
_launcher_root: list[str] = []


def _launcher_dir() -> str:
    if not _launcher_root:
        path = tempfile.mkdtemp(prefix="maxkernel-sandbox-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _launcher_root.append(path)
    return _launcher_root[0]


def _forkserver_executable(tier: str, child_env: dict[str, str]) -> str | None:
    """The executable multiprocessing starts the forkserver with (None = the plain interpreter).

    One forkserver per process, so the first pool's tier and environment win (as with the preload)."""
    if tier not in _launchers:
        env = {**sandbox.job_environment(os.environ), **child_env, sandbox.ROLE_ENV: f"forkserver:{tier}"}
        if tier == "bwrap":
            argv = sandbox.forkserver_bwrap_argv(
                sandbox.bwrap_path() or "bwrap", env, os.getcwd(), uid=os.getuid()
            )
            _launchers[tier] = sandbox.write_launcher(argv, _launcher_dir())
        elif tier == "namespaces":
            _launchers[tier] = sandbox.write_launcher(sandbox.env_launcher_argv(env), _launcher_dir())
        else:
            _launchers[tier] = None
    return _launchers[tier]


_all_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_all_pools() -> None:
    # Registered after multiprocessing's own exit hook, so it runs first: without it that hook would
    # join our non-daemon children (a hung job, an idle device worker) forever.
    for pool in list(_all_pools):
        pool.close()


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()


def get_default_pool() -> WorkerPool:
    """The process-wide pool (created on first use, closed at exit)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = WorkerPool()
        return _default_pool
