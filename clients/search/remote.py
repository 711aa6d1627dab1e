"""`Evaluator` over an MCP server: the search's only way to judge a kernel for real.

One `MCPEvaluator` per server (an URL, a stdio command, or an in-process server object in tests). It
calls `evaluate_kernel` (compile -> validate -> profile) and reads the structured report into a
`NodeVerdict`. A tool result with is_error is the kernel's fault (it took its process down); a broken
connection or protocol error is the server's, and becomes `EvaluatorDown` so the work moves elsewhere.
"""

from __future__ import annotations

import json
import shlex
import time
from contextlib import AsyncExitStack
from typing import Any

from maxkernel.clients.search.evaluator import EvalTask, EvaluatorDown
from maxkernel.clients.search.graph import NodeVerdict


def time_of(profile: dict[str, Any] | None) -> tuple[float | None, str | None]:
    """The ranking time: a native on-chip median when there is one, else the labeled static estimate."""
    if not profile:
        return None, None
    cand = (profile.get("measured") or {}).get("candidate")
    if cand and profile.get("candidate_measured") and profile.get("candidate_execution") == "native":
        return float(cand["median_ms"]) * 1000.0, "measured"
    est = profile.get("static_estimate")
    if est and est.get("estimated_time_us") is not None:
        return float(est["estimated_time_us"]), "estimate"
    return None, None


def verdict_from_report(report: dict[str, Any], server: str, versions: str, duration_s: float) -> NodeVerdict:
    ok = bool(report.get("ok"))
    t, label = time_of(report.get("profile"))
    failure = None
    stage = report.get("stopped_at")
    if stage and report.get(stage if stage != "validate" else "validation"):
        f = report[stage if stage != "validate" else "validation"].get("failure") or {}
        failure = f"{f.get('kind', '?')}: {f.get('summary', '')}".strip()
    return NodeVerdict(
        status="valid" if ok else "invalid",
        stopped_at=stage,
        time_us=t if ok else None,
        time_label=label if ok else None,
        compile=report.get("compile"),
        validation=report.get("validation"),
        profile=report.get("profile"),
        failure=failure,
        server=server,
        tool_versions=versions,
        duration_s=round(duration_s, 3),
    )


def client_target(spec: Any) -> Any:
    """What `mcp.Client` takes: a server object as is, an http(s) URL as is, `stdio:CMD ARGS` as params."""
    if not isinstance(spec, str):
        return spec
    if spec.startswith(("http://", "https://")):
        return spec
    if spec.startswith("stdio:"):
        from mcp import StdioServerParameters

        argv = shlex.split(spec[len("stdio:") :])
        return StdioServerParameters(command=argv[0], args=argv[1:])
    raise ValueError(f"--server {spec!r}: give an http(s)://host:port/mcp URL or 'stdio:COMMAND ARGS'")


class MCPEvaluator:
    """Evaluates kernels on one MCP server. Use inside `async with` (the connection lives that long)."""

    def __init__(self, spec: Any, *, name: str | None = None, read_timeout_s: float = 1800.0) -> None:
        self.spec = spec
        self.name = name or (spec if isinstance(spec, str) else f"in-process:{id(spec):x}")
        self.read_timeout_s = read_timeout_s
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._versions = ""

    async def __aenter__(self) -> MCPEvaluator:
        from mcp import Client

        self._stack = AsyncExitStack()
        try:
            self._client = await self._stack.enter_async_context(
                Client(client_target(self.spec), read_timeout_seconds=self.read_timeout_s)
            )
        except Exception as e:
            await self._stack.aclose()
            raise EvaluatorDown(f"cannot connect to {self.name}: {type(e).__name__}: {e}") from e
        info = self._client.server_info
        self._versions = f"{getattr(info, 'name', '?')}-{getattr(info, 'version', '?')}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._stack is not None:
            try:
                await self._stack.aclose()
            except Exception:  # a dead server's transport may fail to close cleanly; nothing to save
                pass

    async def tool_versions(self) -> str:
        return self._versions

    @property
    def connection(self) -> Any:
        """The open `mcp.Client` (the suite's Auto loops call tools over the same connection)."""
        if self._client is None:
            raise EvaluatorDown(f"{self.name} is not connected")
        return self._client

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Any other tool (the suite's baseline profiles, the tester's cases): the report dict, or
        `{"ok": False, "tool_error": text}` for is_error; EvaluatorDown when the server is gone."""
        if self._client is None:
            raise EvaluatorDown(f"{self.name} is not connected")
        try:
            result = await self._client.call_tool(tool, arguments)
        except Exception as e:  # transport or protocol failure: the server, not the kernel
            raise EvaluatorDown(f"{type(e).__name__}: {e}") from e
        text = " ".join(getattr(c, "text", "") for c in result.content).strip()
        if result.is_error:
            return {"ok": False, "tool_error": text[:4000] or f"{tool} failed"}
        report = result.structured_content
        if report is None:
            try:
                report = json.loads(text)
            except ValueError:
                report = {}
        return report.get("result", report) if set(report) == {"result"} else report

    async def _read(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        from maxkernel.clients.mcp_client import ServerToolError

        report = await self.call(tool, {k: v for k, v in arguments.items() if v is not None})
        if "tool_error" in report and report.get("ok") is False:
            raise ServerToolError(tool, report["tool_error"])
        return report

    async def get_task(self, task: str) -> dict[str, Any]:
        return await self._read("get_task", {"task": task})

    async def describe_reference(self, reference: str, size: str | None = None) -> dict[str, Any]:
        return await self._read("describe_reference", {"reference": reference, "size": size})

    async def evaluate(self, source: str, task: EvalTask, *, seeds: int | None = None) -> NodeVerdict:
        if self._client is None:
            raise EvaluatorDown(f"{self.name} is not connected")
        args = {
            "reference": task.reference,
            "kernel_source": source,
            "compile_target": task.target,
            "validate_target": task.validate_target or task.target,
            "profile_target": task.profile_target,
            "size": task.size,
            "seeds": seeds or task.seeds,
            "timeout_s": task.timeout_s,
        }
        if task.check_sizes:
            args["check_sizes"] = list(task.check_sizes)
        # no seed_offset: the server draws fresh seeds for every evaluation, re-verifications included;
        # size None is left out, so the server's own default (the production size) applies, as in _read
        args = {k: v for k, v in args.items() if v is not None}
        started = time.perf_counter()
        try:
            result = await self._client.call_tool("evaluate_kernel", args)
        except Exception as e:  # transport or protocol failure: the server, not the kernel
            raise EvaluatorDown(f"{type(e).__name__}: {e}") from e
        took = time.perf_counter() - started
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            return NodeVerdict(
                status="invalid",
                failure=text[:4000] or "evaluate_kernel failed",
                server=self.name,
                tool_versions=self._versions,
                duration_s=round(took, 3),
            )
        report = result.structured_content
        if report is None:  # a server without an output schema sends the report as JSON text
            try:
                report = json.loads(" ".join(getattr(c, "text", "") for c in result.content))
            except ValueError:
                report = {}
        return verdict_from_report(report, self.name, self._versions, took)
