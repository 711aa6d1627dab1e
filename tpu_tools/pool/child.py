"""The child side of the worker pool: what runs inside an isolated evaluation process.

Kept apart from `pool.py` and free of pydantic/jax imports so a forked child pays nothing for it.
A child talks to the parent only through one `multiprocessing` connection, with plain tuples:

    ("progress", stage)                      any number, while the job runs
    ("ok", result_json)                      the job returned a JSON-able dict
    ("error" | "oom", type, message, tb)     the job raised (MemoryError / host OOM -> "oom")
    ("exited", code_repr, code)              the job called sys.exit(...)
    ("signal", signum)                       sent by the job's init (sandbox tiers) when the job died
                                             by a signal, just before init exits

Sandboxed (tiers bwrap / namespaces, see `sandbox.py`), the forked child first becomes its own
sandbox (`sandbox_linux.enter_job`) and the job runs in a grandchild under a tiny init.

Anything else (a hang, a signal, os._exit) the parent reads from the process itself.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import json
import os
import resource
import sys
import threading
import traceback

_conn = None  # set in a pool child; report_progress is a no-op elsewhere
_conn_lock = threading.Lock()


def report_progress(stage: str) -> None:
    """Send a stage name to the parent (no-op outside a pool child)."""
    if _conn is None:
        return
    with _conn_lock:
        try:
            _conn.send(("progress", str(stage)))
        except (OSError, ValueError):
            pass


class InheritedFd:
    """A descriptor handed to a child with its start request (forkserver: sent with it over the unix
    socket; spawn: passed at exec). Unpickles as the child's own fd number."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        return (_detach, (DupFd(self.fd),))  # called while pickling for a start: no resource sharer


def _detach(dup) -> int:
    return dup.detach()


def _redirect_stdio(path: str | None, fd: int | None = None) -> None:
    # stdout too: an MCP stdio server's protocol stream must never see a kernel's prints.
    sys.stdout.flush()
    sys.stderr.flush()
    if fd is None:
        try:  # no O_CREAT: if the parent already gave up on us and removed the file, don't leave a new one
            fd = os.open(path or os.devnull, os.O_WRONLY | os.O_TRUNC)
        except OSError:
            fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)


def _apply_env(env: dict[str, str], sys_path: list[str], home: str | None = None) -> None:
    """The job's whole environment: the allowed part of what it inherited, the pool's settings, HOME."""
    from maxkernel.tpu_tools.pool.sandbox_linux import job_environment

    kept = job_environment(os.environ)
    os.environ.clear()
    os.environ.update(kept)
    os.environ.update(env)
    if home:
        os.environ["HOME"] = home
    os.environ["TMPDIR"] = "/tmp"
    for entry in reversed(sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    # jax read its JAX_* flags when the forkserver imported it; an env= override must go through config.
    jax = sys.modules.get("jax")
    if jax is None:
        return
    values = jax.config.values
    for key, raw in env.items():
        name = key.lower()
        if not key.startswith("JAX_") or name not in values:
            continue
        current = values[name]
        if isinstance(current, bool):
            value: object = raw.strip().lower() in ("1", "true", "yes", "on")
        elif isinstance(current, int):
            value = int(raw)
        elif isinstance(current, float):
            value = float(raw)
        else:
            value = raw
        jax.config.update(name, value)


def noop_job() -> dict:
    """The empty job `WorkerPool.warm_up` runs to know the forkserver (and its sandbox) serves."""
    return {}


def _is_host_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    # jax host allocation failure; a Mosaic VMEM "would exceed memory" RESOURCE_EXHAUSTED is a kernel error.
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text and "Out of memory" in text


def _run_job(fn: str, kwargs_json: str) -> tuple:
    """Run one job and return its terminal message (never raises, except BaseExceptions we pass on)."""
    try:
        module_name, _, func_name = fn.partition(":")
        if not module_name or not func_name:
            raise ValueError(f"job fn should be 'package.module:function', got {fn!r}")
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(**json.loads(kwargs_json))
        if not isinstance(result, dict):
            raise TypeError(f"job {fn} returned {type(result).__name__}, expected a JSON-able dict")
        try:
            return ("ok", json.dumps(result))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"job {fn} returned a dict that is not JSON-able: {exc}") from None
    except SystemExit as exc:
        code = exc.code
        exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        return ("exited", repr(code) if code is not None else "", exit_code)
    except BaseException as exc:  # noqa: BLE001 - every failure of a job is data for the parent
        kind = "oom" if _is_host_oom(exc) else "error"
        return (kind, type(exc).__name__, str(exc), traceback.format_exc())


def forked_main(
    fn: str,
    kwargs_json: str,
    memory_limit_bytes: int | None,
    env: dict[str, str],
    sys_path: list[str],
    stderr: int,
    conn,
    sandbox_plan: dict | None = None,
) -> None:
    """Entry point of a one-shot child forked from the jax-preloaded forkserver.

    `stderr` is a descriptor handed over by the parent (`InheritedFd`): a sandboxed child cannot open
    the parent's files by name. `sandbox_plan` (None in the none tier) holds the
    job's scratch dir, hidden paths and tmpfs size.
    """
    global _conn
    os.setsid()  # our own process group: the parent kills the job and everything it started at once
    from maxkernel.tpu_tools.pool import sandbox_linux

    sandbox_linux.die_with_parent()  # every tier: a job never outlives its forkserver
    _redirect_stdio(None, stderr)
    scratch = (sandbox_plan or {}).get("scratch")
    if sandbox_plan is not None:
        try:
            sandbox_linux.enter_job(
                scratch,
                sandbox_plan["hide"],
                sandbox_plan["tmp_size"],
                conn,
                sandbox_plan["inputs"],
                sandbox_plan.get("runtime", ()),
            )
        except OSError as exc:  # fail closed: never run the job half-sandboxed
            conn.send(("error", "SandboxSetupError", f"sandbox setup failed: {exc}", traceback.format_exc()))
            os._exit(0)
    _close_resource_tracker()
    # The preloaded modules' objects never die here: keep the collector from walking them (and from
    # touching their pages, which fork shares copy-on-write). Measured: a first small jit 0.45 -> 0.3 s.
    gc.freeze()
    if memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    _apply_env(env, sys_path, home=scratch)
    _conn = conn
    message = _run_job(fn, kwargs_json)
    with _conn_lock:
        conn.send(message)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (jax atexit hooks, thread joins): the parent has the answer.
    os._exit(message[2] if message[0] == "exited" else 0)


def _close_resource_tracker() -> None:
    """The job must not reach the parent's resource tracker (it unlinks whatever names it is sent)."""
    try:
        from multiprocessing import resource_tracker

        tracker = resource_tracker._resource_tracker
        if tracker._fd is not None:
            os.close(tracker._fd)
            tracker._fd = None
    except (ImportError, AttributeError, OSError):
        pass


def device_worker_main(
    conn, env: dict[str, str], sys_path: list[str], stderr: int, preload, home: str | None = None
) -> None:
    """Entry point of the long-lived, spawned device-owning worker: runs jobs one at a time, in order."""
    global _conn
    os.environ.pop("MAXKERNEL_SANDBOX_ROLE", None)
    os.setsid()
    from maxkernel.tpu_tools.pool import sandbox_linux

    sandbox_linux.die_with_parent()
    _redirect_stdio(None, stderr)
    _apply_env(env, sys_path, home=home)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a job that needs it will report the import error itself
            traceback.print_exc()
    gc.freeze()
    _conn = conn
    conn.send(("ready",))
    while True:
        try:
            fn, kwargs_json = conn.recv()
        except EOFError:
            os._exit(0)
        # Each job's stderr tail starts fresh; fds 1 and 2 share one file description.
        sys.stdout.flush()
        sys.stderr.flush()
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
        message = _run_job(fn, kwargs_json)
        with _conn_lock:
            conn.send(message)
