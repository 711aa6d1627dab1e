"""The orchestrator's only door to kernel verdicts: a typed MCP client of a maxkernel server.

The loops never compile or run a kernel themselves; they call the server's tools through this class.
It connects over stdio (a spawned `maxkernel-server` with an explicit environment, since the SDK
passes only an allow-list), streamable HTTP (with a bearer token), or in memory (tests). Every call
passes a progress callback, so the server's heartbeats keep HTTP streams alive, and a read timeout
sized for the longest evaluation.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp import Client, MCPError, StdioServerParameters

ProgressFn = Callable[[str, str], Awaitable[None] | None]  # (tool, message)
DEFAULT_READ_TIMEOUT_S = 3600.0  # compile+validate+profile of a big kernel on a queued pool
# Environment the stdio server child needs beyond the SDK's allow-list (HOME, PATH, ...).
_ENV_PREFIXES = (
    "JAX_",
    "XLA_",
    "TPU_",
    "LIBTPU",
    "PJRT_",
    "CUDA_",
    "PYTHON",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
)
_ENV_NAMES = ("HOME", "PATH", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG", "LC_ALL")


class ServerToolError(Exception):
    """A tool answered with is_error: the caller's mistake, or a kernel that took its process down."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool


class ServerUnavailable(Exception):
    """The server could not be reached, or the connection broke; the message says which server."""


def server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The stdio child's environment: the usual basics plus JAX/XLA/TPU settings, chosen explicitly."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)}
    env.update(extra or {})
    return env


def stdio_params(workspace: str, *, max_workers: int = 2, env: Mapping[str, str] | None = None):
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "maxkernel.server.main",
            "--workspace",
            str(workspace),
            "--max-workers",
            str(max_workers),
        ],
        env=server_env(env),
    )


def http_transport(url: str, token: str | None):
    """Streamable HTTP with the bearer token and no read timeout (progress does not reset it)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=None))
    return streamable_http_client(url, http_client=client)


class KernelServerClient:
    """Async context manager around `mcp.Client`; one typed method per tool, each returning the report dict.

    `target` is anything `mcp.Client` accepts: a server object (in memory), `StdioServerParameters`, or
    a transport. Use `stdio(...)`, `http(...)` or `in_memory(...)` to build one.
    """

    def __init__(
        self,
        target: Any,
        *,
        label: str = "server",
        on_progress: ProgressFn | None = None,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self._target, self.label, self.on_progress, self.read_timeout_s = (
            target,
            label,
            on_progress,
            read_timeout_s,
        )
        self._client: Client | None = None

    @classmethod
    def stdio(cls, workspace: str, **kwargs: Any) -> KernelServerClient:
        return cls(stdio_params(workspace), label=f"stdio:{workspace}", **kwargs)

    @classmethod
    def http(cls, url: str, token: str | None = None, **kwargs: Any) -> KernelServerClient:
        return cls(http_transport(url, token), label=url, **kwargs)

    @classmethod
    def in_memory(cls, server: Any, **kwargs: Any) -> KernelServerClient:
        return cls(server, label="in-memory", **kwargs)

    @classmethod
    def sharing(cls, client: Client, label: str, **kwargs: Any) -> KernelServerClient:
        """A typed view of a connection another owner opened and will close (the suite's server pool)."""
        view = cls(None, label=label, **kwargs)
        view._client = client
        return view

    async def __aenter__(self) -> KernelServerClient:
        self._client = Client(self._target, read_timeout_seconds=self.read_timeout_s)
        try:
            await self._client.__aenter__()
        except Exception as e:  # the SDK wraps connect failures in exception groups
            self._client = None
            raise ServerUnavailable(
                f"cannot connect to maxkernel server {self.label}: {_root_cause(e)}"
            ) from e
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.__aexit__(*exc)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call `tool`; return its structured content (unwrapping `{"result": ...}`); raise on is_error."""
        if self._client is None:
            raise RuntimeError("KernelServerClient is not connected: use `async with`")

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if self.on_progress is not None and message:
                result = self.on_progress(tool, message)
                if result is not None:
                    await result

        args = {k: v for k, v in arguments.items() if v is not None}
        try:
            result = await self._client.call_tool(tool, args, progress_callback=progress)
        except MCPError as e:
            raise ServerUnavailable(f"{self.label}: {tool} failed at the protocol level: {e.message}") from e
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            raise ServerToolError(tool, text or f"{tool} failed without a message")
        data = result.structured_content
        if isinstance(data, dict) and set(data) == {"result"}:
            return data["result"]
        return data

    # ---- typed tool methods: keyword names match the server's tool arguments -----------------------

    async def compile_kernel(
        self,
        source: str,
        reference: str,
        target: str = "tpu-v6e",
        size: str | None = None,
        timeout_s: float | None = None,
    ) -> dict:
        return await self.call(
            "compile_kernel",
            {
                "kernel_source": source,
                "reference": reference,
                "target": target,
                "size": size,
                "timeout_s": timeout_s,
            },
        )

    async def validate_kernel(
        self,
        source: str,
        reference: str,
        target: str = "cpu",
        size: str | None = None,
        seeds: int = 3,
        timeout_s: float | None = None,
        seed_offset: int | None = None,
        case: dict | None = None,
        allow_weak_check: bool | None = None,
        check_sizes: list[str] | None = None,
    ) -> dict:
        """`case`: an extra input case ({name, sizes, distribution, scale}); None for the task's own inputs.
        `check_sizes` None: the server's default check sizes.

        `seed_offset` None: the server draws the seeds at random (recorded in the verdict).
        """
        args = {
            "kernel_source": source,
            "reference": reference,
            "target": target,
            "size": size,
            "seeds": seeds,
            "case": case,
            "allow_weak_check": allow_weak_check,
            "timeout_s": timeout_s,
        }
        if seed_offset is not None:
            args["seed_offset"] = seed_offset
        if check_sizes is not None:
            args["check_sizes"] = check_sizes
        return await self.call("validate_kernel", args)

    async def profile_kernel(
        self,
        source: str,
        reference: str,
        target: str = "local",
        size: str | None = None,
        timeout_s: float | None = None,
    ) -> dict:
        return await self.call(
            "profile_kernel",
            {
                "kernel_source": source,
                "reference": reference,
                "target": target,
                "size": size,
                "timeout_s": timeout_s,
            },
        )

    async def evaluate_kernel(self, source: str, reference: str, **kwargs: Any) -> dict:
        return await self.call("evaluate_kernel", {"kernel_source": source, "reference": reference, **kwargs})

    async def autotune_kernel(
        self,
        template_source: str,
        space: dict[str, list],
        reference: str,
        target: str = "tpu-v6e",
        size: str | None = None,
        max_configs: int = 4,
        objective: str = "estimate",
        check_sizes: list[str] | None = None,
    ) -> dict:
        args = {
            "template_source": template_source,
            "space": space,
            "reference": reference,
            "target": target,
            "size": size,
            "max_configs": max_configs,
            "objective": objective,
        }
        if check_sizes is not None:  # unset: the server's default check sizes
            args["check_sizes"] = check_sizes
        return await self.call("autotune_kernel", args)

    async def summarize_trace(self, trace_path: str, top: int = 15) -> dict:
        return await self.call("summarize_trace", {"trace_path": trace_path, "top": top})

    async def list_tasks(self) -> list[dict]:
        return await self.call("list_tasks", {})

    async def get_task(self, task: str) -> dict:
        return await self.call("get_task", {"task": task})

    async def describe_reference(self, reference: str, size: str | None = None) -> dict:
        return await self.call("describe_reference", {"reference": reference, "size": size})

    async def list_chips(self) -> list[dict]:
        return await self.call("list_chips", {})

    async def find_examples(self, **arguments: Any) -> dict:
        """query / operator / primitives / error / reference, k, budget_tokens, kinds (see the tool)."""
        return await self.call("find_examples", arguments)


def _root_cause(error: BaseException) -> str:
    """The innermost message of a (possibly nested) exception group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"
