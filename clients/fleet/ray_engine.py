"""`--engine ray`: every tool call is one Ray task, placed and retried by Ray.

The orchestrator (the Ray driver) submits `serve(tool, args)` with the call's placement (`placement.py`)
and awaits it. Ray picks the host (any CPU slot; a host with the chip kind to profile on a chip), runs the
call in that host's warm MCP server (`host.py`), and when the node dies mid-call runs it again on another
(`max_retries`). We bound how many calls are in flight (`--concurrency`) and nothing else: no queue of
ours, no host choice, no retry loop. Finished results come back once; the run's SQLite store stays the
one record (its writes are keyed by content, so a result seen twice is written once).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from maxkernel.clients.fleet.engine import FleetView
from maxkernel.clients.fleet.placement import NoHostFor, ProfileOn, place
from maxkernel.clients.search.evaluator import EvalTask, NoEvaluators
from maxkernel.clients.search.graph import NodeVerdict

T = TypeVar("T")
RAY_EXTRA_HINT = 'Ray is not installed: pip install "maxkernel[ray]"'
_RESOURCES_TTL_S = 5.0


class RayUnavailable(Exception):
    """The Ray cluster cannot be reached (or Ray is not installed): one line, exit 1."""


class NoRayCluster(RayUnavailable):
    """`--engine ray` with no --ray-address and no cluster on this machine: the caller's mistake, exit 2."""


# Ray's own words (ray._private.services) when address="auto" finds no cluster on this machine.
_NO_CLUSTER_AT_AUTO = "Could not find any running Ray instance"


def connect_error(address: str, e: Exception, command: str = "COMMAND") -> RayUnavailable:
    """What `ray.init` failing means, in one line. With no --ray-address and no cluster running here, the
    line names the README's one-box recipe (clients/fleet/local_cluster.py) with the caller's `command`."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if address == "auto" and isinstance(e, ConnectionError) and _NO_CLUSTER_AT_AUTO in first:
        return NoRayCluster(
            "--engine ray found no Ray cluster on this machine and no --ray-address was given: give "
            '--ray-address HEAD_IP:6379 of a running cluster (README, "A fleet on Ray"), or try it on one '
            f"box: python -m maxkernel.clients.fleet.local_cluster --unshare --workers 2 -- {command}"
        )
    return RayUnavailable(f"cannot connect to the Ray cluster at {address}: {first}")


def _this_command() -> str:
    """The command line that was run, for the one-box recipe (COMMAND when not run as a console script)."""
    import os
    import shlex

    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return shlex.join([name, *sys.argv[1:]]) if name.startswith("maxkernel") else "COMMAND"


def _remote_serve():
    import ray

    @ray.remote
    def serve(tool: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
        from maxkernel.clients.fleet.host import serve as serve_here

        return serve_here(tool, arguments, call_id)

    return serve


class RayEngine:
    """The Ray driver's side. Use inside `with` (connects on enter, disconnects on exit)."""

    def __init__(
        self, address: str = "auto", *, concurrency: int = 2, profile_on: ProfileOn = "auto"
    ) -> None:
        self.address, self.profile_on = address, profile_on
        self.concurrency = max(1, concurrency)
        self.slots = asyncio.Semaphore(self.concurrency)
        self.name = f"ray:{address}"
        self.dead: list[str] = []  # hosts lost during the run (Ray moved their work)
        self._versions = ""
        self._resources: tuple[float, dict[str, float]] = (0.0, {})
        self._seen_nodes: dict[str, str] = {}  # node id -> host name (from its calls), else ip:node
        self._lost: set[str] = set()
        self._stdout: Any = None
        self.calls = 0
        self.retried_calls = 0

    # ---- connection
    def __enter__(self) -> RayEngine:
        try:
            import ray
        except ImportError:
            raise RayUnavailable(RAY_EXTRA_HINT) from None
        try:
            ray.init(
                address=self.address,
                log_to_driver=False,
                logging_level="ERROR",
                configure_logging=False,
                namespace="maxkernel",
            )
        except Exception as e:  # ConnectionError, or no cluster at 'auto'
            raise connect_error(self.address, e, _this_command()) from None
        # Ray's driver prints the cluster's error messages (a node died, a worker was killed) on stdout;
        # they are diagnostics, so they go to stderr and `--json` stdout stays JSON.
        self._stdout, sys.stdout = sys.stdout, sys.stderr
        self._serve = _remote_serve()
        self.fleet()  # the nodes up at start: a node lost later is named in `dead`
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        import ray

        ray.shutdown()
        if self._stdout is not None:
            sys.stdout, self._stdout = self._stdout, None

    def cluster_resources(self) -> dict[str, float]:
        at, res = self._resources
        if time.monotonic() - at > _RESOURCES_TTL_S or not res:
            import ray

            res = dict(ray.cluster_resources())
            self._resources = (time.monotonic(), res)
        return res

    def check(self, tool: str, args: dict[str, Any]) -> None:
        """Raise NoHostFor now if no host could ever take this call (a start-up check for the CLIs)."""
        place(tool, args, self.profile_on, self.cluster_resources())

    # ---- the engine interface
    async def tool_versions(self) -> str:
        """The hosts' server name-version, as a `--server` reports it (so the evaluation cache is shared)."""
        if not self._versions:
            from importlib.metadata import PackageNotFoundError, version

            try:
                self._versions = f"maxkernel-{version('maxkernel')}"
            except PackageNotFoundError:
                self._versions = "maxkernel-0"
        return self._versions

    async def call(self, tool: str, args: dict[str, Any], *, label: str = "") -> dict[str, Any]:
        """One tool call on a host Ray picks: `{"host", "versions", "result": CallToolResult JSON, ...}`."""
        import ray

        placement = place(tool, args, self.profile_on, self.cluster_resources())
        opts = placement.options()
        if placement.on_chip:
            opts["max_calls"] = 1  # the device is free again when the call ends (one owner per host)
        call_id = f"{label or tool}:{uuid.uuid4().hex[:12]}"
        async with self.slots:
            self.calls += 1
            try:
                out = await self._serve.options(**opts).remote(tool, args, call_id)
            except ray.exceptions.RayTaskError as e:  # our host code raised: not a node loss
                raise NoEvaluators(f"a fleet host failed {tool}: {str(e).strip().splitlines()[-1]}") from None
            except ray.exceptions.RayError as e:  # retries used up, or the cluster is gone
                self.fleet()
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise NoEvaluators(f"Ray could not run {tool}: {first}") from None
        if out.get("node"):
            self._seen_nodes[out["node"]] = out["host"]  # a lost node is named by its host name
        return out

    async def evaluate(self, source: str, task: EvalTask, *, seeds: int | None = None) -> NodeVerdict:
        return await RayEvaluator(self).evaluate(source, task, seeds=seeds)

    async def run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """`work(evaluator)`: with Ray there is nothing to choose; each call inside is placed by Ray."""
        return await work(RayEvaluator(self))

    def fleet(self) -> FleetView:
        import ray

        try:
            nodes = ray.nodes()
        except Exception:
            return FleetView(engine="ray", hosts_up=0, hosts_busy=None, hosts_lost=list(self.dead))
        up: dict[str, dict] = {}
        for n in nodes:
            nid = n["NodeID"]
            if not n.get("Alive"):  # a dead node lists no resources: known by the id we saw alive
                if nid in self._seen_nodes and nid not in self._lost:
                    self._lost.add(nid)
                    self.dead.append(f"{self._seen_nodes[nid]} (node lost; Ray re-ran its calls elsewhere)")
                continue
            if n.get("Resources", {}).get("CPU", 0) <= 0:  # a head with --num-cpus=0 evaluates nothing
                continue
            up[nid] = n
            self._seen_nodes.setdefault(nid, f"{n.get('NodeManagerAddress', '?')}:{nid[:8]}")
        busy: int | None = None
        try:
            from ray._private.state import available_resources_per_node

            avail = available_resources_per_node()
            busy = sum(
                1
                for nid, n in up.items()
                if avail.get(nid, {}).get("CPU", 0) < n.get("Resources", {}).get("CPU", 0)
            )
        except Exception:  # a private API: without it the line shows '?' busy
            busy = None
        return FleetView(engine="ray", hosts_up=len(up), hosts_busy=busy, hosts_lost=list(self.dead))


def open_ray(args: Any, concurrency: int, *, profile_target: str) -> RayEngine:
    """The engine for a command's `--engine ray` flags (`cli.args.add_engine`), connected, once some host
    is known to take its evaluations; else RayUnavailable with one line, before the command creates
    anything. Every orchestrator command (suite, search, model) opens its fleet here."""
    engine = RayEngine(
        getattr(args, "ray_address", "auto"),
        concurrency=concurrency,
        profile_on=getattr(args, "profile_on", "auto"),
    )
    engine.__enter__()
    try:
        engine.check("evaluate_kernel", {"profile_target": profile_target})
    except NoHostFor as e:
        engine.close()
        raise RayUnavailable(str(e)) from None
    return engine


class RayConnection:
    """The `mcp.Client` surface the Auto loop uses (`call_tool`), each call a Ray task."""

    def __init__(self, evaluator: RayEvaluator) -> None:
        self.evaluator = evaluator

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, **_: Any) -> Any:
        from mcp.types import CallToolResult

        out = await self.evaluator.raw(name, arguments or {})
        return CallToolResult.model_validate(out["result"])


class RayEvaluator:
    """What `run(work)` hands to `work`: the same surface as `remote.MCPEvaluator`, over Ray. It keeps
    the hosts its calls ran on (`hosts`), for the run's report."""

    def __init__(self, engine: RayEngine) -> None:
        self.engine = engine
        self.name = engine.name
        self.hosts: dict[str, int] = {}
        self.connection = RayConnection(self)

    async def tool_versions(self) -> str:
        return await self.engine.tool_versions()

    async def raw(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        out = await self.engine.call(tool, args)
        self.hosts[out["host"]] = self.hosts.get(out["host"], 0) + 1
        return out

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The report dict, or `{"ok": False, "tool_error": text}` for is_error (as MCPEvaluator.call)."""
        out = await self.raw(tool, arguments)
        return _report(out["result"], tool)

    async def evaluate(self, source: str, task: EvalTask, *, seeds: int | None = None) -> NodeVerdict:
        from maxkernel.clients.search.remote import verdict_from_report

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
        out = await self.raw("evaluate_kernel", args)
        result = out["result"]
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content", [])).strip()
            return NodeVerdict(
                status="invalid",
                failure=text[:4000] or "evaluate_kernel failed",
                server=out["host"],
                tool_versions=out.get("versions", ""),
                duration_s=out.get("seconds"),
            )
        return verdict_from_report(
            _report(result, "evaluate_kernel"), out["host"], out.get("versions", ""), out.get("seconds", 0.0)
        )


def _report(result: dict[str, Any], tool: str) -> dict[str, Any]:
    import json

    text = " ".join(c.get("text", "") for c in result.get("content", [])).strip()
    if result.get("isError"):
        return {"ok": False, "tool_error": text[:4000] or f"{tool} failed"}
    report = result.get("structuredContent")
    if report is None:
        try:
            report = json.loads(text)
        except ValueError:
            report = {}
    return report.get("result", report) if set(report) == {"result"} else report


__all__ = ["NoHostFor", "RayEngine", "RayUnavailable"]
