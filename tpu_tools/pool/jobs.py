"""The worker pool's job types: what to run (`JobSpec`), how it ended (`JobOutcome`), and the handle.

Apart from `pool.py` so the watcher (`pool_watch.py`) and the pool share them without a cycle.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from maxkernel.tpu_tools.pool.sandbox import SandboxInfo

GIB = 1 << 30


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
    host_devices: int = Field(
        default=1,
        ge=1,
        le=64,  # mesh.MAX_DEVICES
        description="CPU devices the child's jax backend starts with (a mesh kernel interpreted on N devices)",
    )
    # The sandbox contract (the OS sandbox binds these; without one, the judge's own checks guard them).
    scratch_dir: str | None = Field(
        default=None,
        description="the one directory the job may write to (inputs in, outputs out); None = a fresh "
        "private one, removed after the job. On a TPU host's device lane it must lie under "
        "sandbox.scratch_root() (make it with sandbox.make_scratch_dir())",
    )
    hide_paths: tuple[str, ...] = Field(
        default=(),
        description="paths the job must not see (the reference, the task sources, the expected outputs)",
    )


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
    sandbox: SandboxInfo | None = Field(
        default=None, description="the sandbox the job ran in (set by the pool)"
    )


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
        self._sandboxed = False  # _pgid is the relay of a sandboxed job: kill its namespace's init
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
        if pgid is not None and not (self._sandboxed and kill_children(pgid)):
            kill_group(pgid)
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


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def kill_children(pid: int) -> bool:
    """SIGKILL a sandboxed job's init (the relay's child): the kernel then kills its whole PID namespace
    and the relay ends after it. False if there is no child yet."""
    kids = children_of(pid)
    for kid in kids:
        try:
            os.kill(kid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return bool(kids)


def kill_group(pgid: int) -> None:
    """SIGKILL a job's process group (the child made itself its leader with setsid())."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
