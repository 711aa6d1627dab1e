"""The `--server` engine: K evaluations in flight over a list of MCP servers, scheduled by us.

Least busy server first; a server that dies (`EvaluatorDown`) leaves the list and its work runs again
on another. This is the Ray-less engine (one box, or a few servers a person started by hand); with
`--engine ray` Ray schedules instead and this class is not used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from maxkernel.clients.fleet.engine import FleetView
from maxkernel.clients.search.evaluator import EvalTask, Evaluator, EvaluatorDown, NoEvaluators
from maxkernel.clients.search.graph import NodeVerdict

T = TypeVar("T")


class Dispatcher:
    """K evaluations in flight over several evaluators; work of a dead one is re-queued on the others."""

    def __init__(self, evaluators: Sequence[Evaluator], concurrency: int = 2) -> None:
        if not evaluators:
            raise ValueError("give at least one evaluator (--server)")
        self.evaluators = list(evaluators)
        self.alive = list(evaluators)
        self.in_flight = {e.name: 0 for e in evaluators}
        self.concurrency = max(1, concurrency)
        self.slots = asyncio.Semaphore(self.concurrency)
        self.dead: list[str] = []
        self.name = "+".join(e.name for e in evaluators)

    async def tool_versions(self) -> str:
        versions = sorted({await e.tool_versions() for e in self.alive})
        return ";".join(versions)

    async def evaluate(self, source: str, task: EvalTask, *, seeds: int | None = None) -> NodeVerdict:
        return await self.run(lambda ev: ev.evaluate(source, task, seeds=seeds))

    async def run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """`work(evaluator)` on the least-busy live evaluator; re-run on another if that one dies."""
        async with self.slots:
            while True:
                if not self.alive:
                    raise NoEvaluators(f"every evaluator died: {', '.join(self.dead)}")
                ev = min(self.alive, key=lambda e: self.in_flight[e.name])
                self.in_flight[ev.name] += 1
                try:
                    return await work(ev)
                except EvaluatorDown as e:
                    if ev in self.alive:
                        self.alive.remove(ev)
                        self.dead.append(f"{ev.name} ({e})")
                finally:
                    self.in_flight[ev.name] -= 1

    def fleet(self) -> FleetView:
        busy = sum(1 for e in self.alive if self.in_flight[e.name] > 0)
        return FleetView(
            engine="servers", hosts_up=len(self.alive), hosts_busy=busy, hosts_lost=list(self.dead)
        )
