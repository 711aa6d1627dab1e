"""What runs on a fleet host: one maxkernel MCP server per evaluating process, called in memory.

A Ray task lands in one of the host's Ray worker processes and calls `serve(tool, arguments)`. The first
call in that process builds the same MCP server `maxkernel-server` runs (its workspace, its sandboxed
forkserver `WorkerPool` with one worker: one Ray slot, one evaluation at a time) and keeps it warm for
the next call. So a fleet evaluation takes exactly the path a `--server` evaluation takes: tool ->
`Evaluator` -> OS-sandboxed pool child. Nothing here schedules or retries; Ray does both.

Each verdict names its host (`Environment.host`, stamped by the judge next to the sandbox): the name
in `$MAXKERNEL_HOST` when the host was started with one, else `hostname:<Ray node id>`.
`$MAXKERNEL_FLEET_TRACE` (a file path) appends one JSON line per call start and end, for a person (or a
test) who wants the fleet's timeline on a shared filesystem.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import socket
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from typing import Any

HOST_ENV = "MAXKERNEL_HOST"
TRACE_ENV = "MAXKERNEL_FLEET_TRACE"
WORKSPACE_ENV = "MAXKERNEL_FLEET_WORKSPACE"


def host_name() -> str:
    """This host's name in verdicts and reports; set once per process (the judge stamps it)."""
    name = os.environ.get(HOST_ENV)
    if not name:
        node = ""
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()[:8]
        except Exception:  # not inside Ray: the plain hostname is the host
            pass
        name = f"{socket.gethostname()}:{node}" if node else socket.gethostname()
        os.environ[HOST_ENV] = name
    return name


def trace(event: str, **fields: Any) -> None:
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = json.dumps({"at": time.time(), "event": event, "host": host_name(), "pid": os.getpid(), **fields})
    with open(path, "a", encoding="utf-8") as f:  # one short write per line: appends do not interleave
        f.write(line + "\n")


class HostServer:
    """The process's MCP server, open for the life of the process on a private event-loop thread."""

    def __init__(self) -> None:
        from maxkernel.server.app import build_server

        root = os.environ.get(WORKSPACE_ENV) or tempfile.gettempdir()
        self.workspace = tempfile.mkdtemp(prefix=f"maxkernel-host-{os.getpid()}-", dir=root)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="maxkernel-host", daemon=True).start()
        self.server = build_server(self.workspace, max_workers=1)
        self._stack = AsyncExitStack()
        self.client = self._run(self._open())
        self.versions = f"{self.client.server_info.name}-{self.client.server_info.version}"
        atexit.register(self.close)  # a chip call's worker exits after it: its pool lets go of the device

    def close(self) -> None:
        """Close the server (its lifespan closes the pool, killing its children, the device worker too)."""
        try:
            asyncio.run_coroutine_threadsafe(self._stack.aclose(), self.loop).result(timeout=30)
        except Exception:  # exiting anyway; nothing to save
            pass

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def _open(self) -> Any:
        from mcp import Client

        return await self._stack.enter_async_context(Client(self.server, read_timeout_seconds=3600.0))

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's `CallToolResult` as JSON (the orchestrator rebuilds it), is_error included."""
        result = self._run(self.client.call_tool(tool, arguments))
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)


_server: HostServer | None = None
_lock = threading.Lock()


def serve(tool: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """One tool call on this host: `{"host", "versions", "result", "started_at", "seconds"}`."""
    global _server
    host = host_name()
    key = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode()).hexdigest()[:16]
    trace("start", call=call_id, tool=tool, args_key=key)
    started = time.time()
    with _lock:
        if _server is None:
            _server = HostServer()
    result = _server.call(tool, arguments)
    seconds = round(time.time() - started, 3)
    trace("end", call=call_id, tool=tool, args_key=key, seconds=seconds)
    try:
        import ray

        node = ray.get_runtime_context().get_node_id()
    except Exception:  # not inside Ray
        node = ""
    return {
        "host": host,
        "node": node,
        "versions": _server.versions,
        "result": result,
        "started_at": started,
        "seconds": seconds,
    }
