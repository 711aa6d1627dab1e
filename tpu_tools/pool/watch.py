"""Watching one job's child process until it ends, and naming how it ended.

A child reports progress and a terminal message over its pipe (see `pool_child.py`); everything else
(a hang, a signal, os._exit, memory past the cap) is read here from the process, its group and its
stderr file, and becomes one `JobOutcome`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.connection
import os
import signal
import threading
import time
from multiprocessing import spawn

from maxkernel.tpu_tools.pool.jobs import GIB, JobHandle, JobOutcome, kill_children

STDERR_TAIL_BYTES = 4096
WATCHDOG_INTERVAL_S = 0.5


def kill_job(proc, sandboxed: bool = False) -> None:
    """Kill a running job from its runner thread (the only thread that polls `proc`).

    Sandboxed, `proc` is the relay outside the job's PID namespace: kill the namespace's init (its
    child) and let the relay end as init ends, which is after the kernel has killed everything in the
    namespace; so when `proc` is over, so is every process the job started.
    """
    if sandboxed and kill_children(proc.pid):
        return
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


def _group_rss_bytes(root: int) -> int:
    """Resident set of the job's process group plus every descendant of `root` (a setsid'd child, or a
    whole sandbox whose outermost process is bwrap, leaves the group but not the tree)."""
    page = os.sysconf("SC_PAGE_SIZE")
    procs: dict[int, tuple[int, int, int]] = {}  # pid -> (ppid, pgrp, rss pages)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            procs[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[21]))  # ppid, pgrp, rss
        except (OSError, ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    tree: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in tree:
            tree.add(pid)
            stack.extend(children.get(pid, ()))
    members = tree | {pid for pid, (_, pgrp, _) in procs.items() if pgrp == root}
    return sum(procs[p][2] for p in members if p in procs) * page


def read_tail(path: str) -> str:
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


_start_lock = threading.Lock()  # multiprocessing.Process.start is not thread-safe (shared _children set)


@contextlib.contextmanager
def starting_without_main(executable: str | None = None):
    """Start processes without re-running the caller's __main__ in the child (and, given `executable`,
    through that launcher instead of the plain interpreter: how the sandbox goes around it).

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
        plain = spawn.get_executable()
        if executable is not None:
            spawn.set_executable(executable)
        try:
            yield
        finally:
            spawn.get_preparation_data = original
            spawn.set_executable(plain)


class Job:
    """What one running job needs while it is watched: its process, pipe and stderr file."""

    def __init__(self, handle: JobHandle, proc, conn, stderr_path: str) -> None:
        self.handle, self.proc, self.conn, self.stderr_path = handle, proc, conn, stderr_path
        self.clean_end = False  # the child reported a result itself (and, for the device worker, lives on)
        self.signal: int | None = None  # sandbox tiers: the job died by this signal (told by its init)
        self.sandboxed = False  # proc is the relay of a sandboxed job (see kill_job)


def watch(job: Job, deadline: float) -> JobOutcome:
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
            kill_job(proc, job.sandboxed)
            return out(status="cancelled", message="cancelled; process group killed")
        if now >= deadline:
            kill_job(proc, job.sandboxed)
            return out(
                status="timeout",
                message=f"timed out after {spec.timeout_s:.1f} s; process group killed",
                detail=read_tail(job.stderr_path),
            )
        if now >= next_check:
            next_check = now + WATCHDOG_INTERVAL_S
            cap = spec.memory_limit_bytes
            if cap:
                rss = _group_rss_bytes(proc.pid)
                if rss > cap:
                    kill_job(proc, job.sandboxed)
                    return out(
                        status="oom",
                        message=f"exceeded memory cap of {_gib(cap)} (resident set {_gib(rss)}); "
                        "process group killed",
                        detail=read_tail(job.stderr_path),
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
            if message[0] == "signal":
                job.signal = int(message[1])
                continue
            return _terminal(message, job, out)
        if proc.sentinel in ready:
            # The process is gone; a terminal message may still sit in the pipe.
            while conn_open and job.conn.poll(0):
                try:
                    message = job.conn.recv()
                except (EOFError, OSError):
                    break
                if message[0] == "progress":
                    handle._add_progress(message[1])
                elif message[0] == "signal":
                    job.signal = int(message[1])
                else:
                    return _terminal(message, job, out)
            if handle._cancelled:
                return out(status="cancelled", message="cancelled; process group killed")
            return _died(job, out)


def _terminal(message: tuple, job: Job, out) -> JobOutcome:
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
    tail = read_tail(job.stderr_path).strip()
    detail = tb + (f"\n--- stderr tail ---\n{tail}" if tail else "")
    if kind == "oom":
        cap = job.handle.spec.memory_limit_bytes
        what = f"exceeded memory cap of {_gib(cap)}" if cap else "ran out of host memory"
        return out(status="oom", message=f"{what} ({line})", detail=detail)
    return out(status="error", message=line, detail=detail)


def _died(job: Job, out) -> JobOutcome:
    """The process ended without a terminal message: a signal or os._exit."""
    job.proc.join(5)
    code = job.proc.exitcode
    if job.signal is not None:  # the sandbox's init saw the job die by this signal
        code = -job.signal
    tail = read_tail(job.stderr_path)
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
