"""Where evaluations run: the one interface the suite and the search see, whatever the fleet is.

An engine runs `work(evaluator)` on some evaluator it picks (`run`), judges one kernel (`evaluate`), and
says what its fleet looks like (`fleet`). Two engines, one job each, never stacked:
- `servers.Dispatcher`: a list of MCP servers (`--server`, or the local stdio server), scheduled by us
  (least busy first; a dead server's work moves to the others). Nothing else schedules there.
- `ray_engine.RayEngine` (`--engine ray`): Ray is the scheduler. Each tool call is one Ray task, placed
  by the resources it needs and retried by Ray when its node dies; our code only bounds how many are
  in flight. No Dispatcher sits on top of Ray, and Ray never sits under a Dispatcher.
The evaluator handed to `work` has the same surface in both: `name`, `evaluate`, `call(tool, args)`,
and `connection` (an `mcp.Client`-like object the Auto loop talks through).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

T = TypeVar("T")


class FleetView(BaseModel):
    """What the live line shows: hosts up and hosts busy (a `--server` list counts its servers)."""

    engine: str
    hosts_up: int
    hosts_busy: int | None = Field(default=None, description="None when the engine cannot tell")
    hosts_lost: list[str] = Field(default_factory=list, description="hosts (or servers) gone during the run")

    def line(self) -> str:
        busy = "?" if self.hosts_busy is None else str(self.hosts_busy)
        lost = f", {len(self.hosts_lost)} lost" if self.hosts_lost else ""
        return f"{self.engine}: {self.hosts_up} hosts up, {busy} busy{lost}"


@runtime_checkable
class Engine(Protocol):
    name: str
    concurrency: int
    dead: list[str]

    async def tool_versions(self) -> str: ...

    async def evaluate(self, source: str, task: Any, *, seeds: int | None = None) -> Any: ...

    async def run(self, work: Callable[[Any], Awaitable[T]]) -> T: ...

    def fleet(self) -> FleetView: ...


def hosts_in(report: Any) -> set[str]:
    """Every host named by a report's verdicts (`environment.host`, at any depth)."""
    found: set[str] = set()
    if isinstance(report, dict):
        env = report.get("environment")
        if isinstance(env, dict) and env.get("host"):
            found.add(str(env["host"]))
        for v in report.values():
            found |= hosts_in(v)
    elif isinstance(report, list):
        for v in report:
            found |= hosts_in(v)
    return found
