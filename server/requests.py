"""Request plumbing for the MCP tools: resolve arguments, run blocking evaluations, map verdicts.

Each long tool resolves its arguments on the event loop (cheap: file checks, task ids), then runs the
blocking `Evaluator` call in a worker thread while the loop forwards its stages as progress. If the
request is cancelled, or its HTTP client disconnects (a 2025-era session outlives its connections, so
nothing else would notice), the Evaluator's cancel event is set, which kills the child process.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from maxkernel.server.workspace import Workspace, WorkspaceError, sha256_text
from maxkernel.tpu_tools.hardware.targets import UnknownTargetError, parse_target
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

T = TypeVar("T")
ProgressFn = Callable[[str], None]
HEARTBEAT_S = 15.0
DISCONNECT_POLL_S = 0.5
# Endings where the kernel took its child process down: not a verdict a model can read field by field.
_FATAL_KINDS = {"crash", "oom", "exited", "internal_error"}


@dataclass
class AppState:
    """What every request shares; built by the server's lifespan."""

    workspace: Workspace
    pool: WorkerPool
    evaluator: Evaluator
    example_dirs: tuple[str, ...] = ()  # the user's kernel folders for find_examples (--examples DIR)


def resolve_kernel(ws: Workspace, kernel_source: str | None, kernel_path: str | None) -> Path:
    if (kernel_source is None) == (kernel_path is None):
        raise ToolError(
            "give exactly one of kernel_source (the module text) or kernel_path (a workspace file)"
        )
    if kernel_source is not None:
        if not kernel_source.strip():
            raise ToolError("kernel_source is empty")
        return ws.save_kernel(kernel_source)
    try:
        path = ws.resolve(kernel_path or "", kind="kernel")
    except WorkspaceError as e:
        raise ToolError(str(e)) from None
    if not path.is_file():
        raise ToolError(f"kernel path {kernel_path!r} is not a file")
    return path


def resolve_reference(ws: Workspace, reference: str) -> str:
    """A workspace path (absolute) or a canonical JaxBench id."""
    from maxkernel.jaxbench.registry import UnknownTaskError, resolve_id

    ref = reference.strip()
    if not ref:
        raise ToolError("reference is empty: give a JaxBench task id or a workspace path")
    from maxkernel.tpu_tools.problem.reference import present

    if any(c in ref for c in "/\\") or ref.endswith(".py") or present(ws.root / ref):
        try:
            return str(ws.resolve(ref, kind="reference"))
        except WorkspaceError as e:
            raise ToolError(str(e)) from None
    try:
        return resolve_id(ref)
    except UnknownTaskError as e:
        from maxkernel.jaxbench.registry import resolve_model

        try:  # a model reference (whole layers for find_hotspots)
            return resolve_model(ref)
        except UnknownTaskError:
            pass
        raise ToolError(f"{mcp_hint(e)} (or give a reference module path inside the workspace)") from None


def mcp_hint(e: Exception) -> str:
    return str(e).replace("`maxkernel tasks` lists them", "list_tasks lists them")


def check_target(target: str) -> str:
    try:
        return parse_target(target).name
    except UnknownTargetError as e:
        raise ToolError(str(e)) from None


def finish(report: T, tool: str) -> T:
    """Fill the kernel's hash; turn a kernel that killed its process, or a caller mistake, into ToolError."""
    path = Path(report.kernel_path)  # type: ignore[attr-defined]
    if report.kernel_sha256 is None and path.is_file():  # type: ignore[attr-defined]
        report.kernel_sha256 = sha256_text(path.read_text(encoding="utf-8"))  # type: ignore[attr-defined]
    failure = report.failure  # type: ignore[attr-defined]
    if failure is not None and failure.kind == "usage_error":
        raise ToolError(failure.summary)
    if failure is not None and failure.kind in _FATAL_KINDS:
        detail = failure.message.strip()[-2000:]
        raise ToolError(
            f"{tool}: kernel {path} (sha256 {report.kernel_sha256}) ended with {failure.kind}: "  # type: ignore[attr-defined]
            f"{failure.summary}" + (f"\n{detail}" if detail else "")
        )
    return report


class Progress:
    """One request's progress notifications: the counter must only increase, across all its stages."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.count = 0
        self.last = "queued"

    async def send(self, message: str) -> None:
        self.count += 1
        self.last = message
        await self.ctx.report_progress(self.count, None, message=message)


async def run_blocking(
    ctx: Context,
    fn: Callable[[ProgressFn, threading.Event], T],
    *,
    prefix: str = "",
    progress: Progress | None = None,
) -> T:
    """Run `fn(on_progress, cancel)` in a thread; forward its stages as MCP progress; cancel kills it."""
    stages: queue.SimpleQueue[str] = queue.SimpleQueue()
    cancel = threading.Event()
    prog = progress or Progress(ctx)

    async def drain() -> bool:
        sent = False
        while True:
            try:
                stage = stages.get_nowait()
            except queue.Empty:
                return sent
            sent = True
            await prog.send(f"{prefix}{stage}")

    http_request = _http_request(ctx)
    last_poll = time.monotonic()

    async def client_gone() -> bool:
        nonlocal last_poll
        if http_request is None or time.monotonic() - last_poll < DISCONNECT_POLL_S:
            return False
        last_poll = time.monotonic()
        try:
            return bool(await http_request.is_disconnected())
        except Exception:  # noqa: BLE001 - a transport that cannot tell: keep running
            return False

    async def forward() -> None:
        last_sent = time.monotonic()
        while True:
            await anyio.sleep(0.1)
            if await client_gone():
                cancel.set()  # the Evaluator kills the job; nobody is left to read its verdict
                return
            if await drain():
                last_sent = time.monotonic()
            elif time.monotonic() - last_sent > HEARTBEAT_S:  # keeps HTTP read timeouts from firing
                last_sent = time.monotonic()
                await prog.send(f"{prog.last.removesuffix(' (still running)')} (still running)")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            result = await anyio.to_thread.run_sync(lambda: fn(stages.put, cancel), abandon_on_cancel=True)
            tg.cancel_scope.cancel()
        await drain()
        return result
    finally:
        cancel.set()  # cancelled (or done): the Evaluator kills the child within ~0.1 s


@dataclass
class _Refused:
    message: str


async def run_refusable(ctx: Context, fn: Callable[[ProgressFn, threading.Event], T]) -> T:
    """`run_blocking` for work whose UsageError is the caller's mistake: one ToolError line. The error
    leaves the thread as a value (raised there, the task group would wrap it in an ExceptionGroup)."""
    from maxkernel.tpu_tools.errors import UsageError

    def guarded(progress: ProgressFn, cancel: threading.Event) -> T | _Refused:
        try:
            return fn(progress, cancel)
        except UsageError as e:
            return _Refused(str(e))

    result = await run_blocking(ctx, guarded)
    if isinstance(result, _Refused):
        raise ToolError(result.message)
    return result


def _http_request(ctx: Context):
    """The starlette Request of an HTTP tool call (None over stdio / in memory)."""
    try:
        request = ctx.request_context.request
    except (AttributeError, ValueError):
        return None
    return request if hasattr(request, "is_disconnected") else None


def state_of(ctx: Context) -> AppState:
    return ctx.request_context.lifespan_context


class CancellableEvaluator(Evaluator):
    """An Evaluator whose every child is killed when the MCP request is cancelled (for multi-call sweeps)."""

    def __init__(self, base: Evaluator, cancel: threading.Event, on_progress: ProgressFn) -> None:
        super().__init__(base.pool, timeout_s=base.timeout_s)
        self._cancel, self._progress = cancel, on_progress

    def _run(self, fn, kwargs, *, timeout_s, on_progress, cancel, needs_device=False, **job):
        return super()._run(
            fn,
            kwargs,
            timeout_s=timeout_s,
            on_progress=on_progress or self._progress,
            cancel=self._cancel,
            needs_device=needs_device,
            **job,  # scratch_dir, hide_paths: the sandbox contract travels with the job
        )


def resolve_call(
    ctx: Context, reference: str, kernel_source: str | None, kernel_path: str | None, target: str
) -> tuple[AppState, str, str, Path]:
    """The arguments every single-kernel tool shares: (state, reference, target, saved kernel path)."""
    st = state_of(ctx)
    ref, tgt = resolve_reference(st.workspace, reference), check_target(target)
    return st, ref, tgt, resolve_kernel(st.workspace, kernel_source, kernel_path)
