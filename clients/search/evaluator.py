"""What the search algorithms evaluate kernels through: a small async interface, a cache and a dispatcher.

`Evaluator.evaluate(source, task) -> NodeVerdict` is all an algorithm needs; `remote.MCPEvaluator`
implements it over an MCP server, `objective.EstimateEvaluator` with the static estimate alone (for
benchmarks). Where the evaluations run (a list of servers, a Ray cluster) is an engine from
`clients/fleet/`; `CachedEvaluator` makes sure the same kernel is never evaluated twice.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from maxkernel.clients.search.graph import NodeVerdict, source_hash
from maxkernel.clients.search.store import EvalCache, cache_key


class EvalTask(BaseModel):
    """What every candidate of one search is judged against."""

    model_config = ConfigDict(frozen=True)

    reference: str = Field(description="JaxBench task id or reference path, as the server resolves it")
    target: str = Field(default="tpu-v6e", description="chip the kernel is compiled and estimated for")
    size: str | None = Field(
        default=None,
        description="the target size; None: the reference's production size (the server resolves it)",
    )
    seeds: int = Field(default=3, ge=1, le=16)
    check_sizes: tuple[str, ...] | None = Field(
        default=None, description="where validation runs the kernel; None: the server's default check sizes"
    )
    validate_target: str | None = Field(
        default=None,
        description="where validation runs; None: the kernel's target, whose numerics the reference is computed "
        "at (off the chip the kernel still runs in interpret mode)",
    )
    profile_target: str = "local"
    timeout_s: float = 300.0


PRODUCTION_SIZE = "(production)"  # the cache's name for EvalTask.size None


class EvaluatorDown(Exception):
    """The evaluator itself is gone (server died, connection refused): the work belongs elsewhere."""


class NoEvaluators(Exception):
    """Every evaluator given to the search has died."""


@runtime_checkable
class Evaluator(Protocol):
    name: str

    async def tool_versions(self) -> str: ...

    async def evaluate(self, source: str, task: EvalTask, *, seeds: int | None = None) -> NodeVerdict:
        """Judge one kernel. Raises EvaluatorDown when the evaluator (not the kernel) is broken."""
        ...


class CachedEvaluator:
    """Never evaluates one kernel twice: a shared on-disk cache plus de-duplication of work in flight."""

    def __init__(self, inner: Any, cache: EvalCache | None, reference_hash: str) -> None:
        self.inner, self.cache, self.reference_hash = inner, cache, reference_hash
        self.name = inner.name
        self._versions: str | None = None
        self._pending: dict[str, asyncio.Future[NodeVerdict]] = {}
        self._memory: dict[str, NodeVerdict] = {}  # this run's verdicts, when no cache file is given
        self.hits = 0
        self.misses = 0

    async def versions(self) -> str:
        if self._versions is None:
            self._versions = await self.inner.tool_versions()
        return self._versions

    async def evaluate(self, source: str, task: EvalTask) -> tuple[NodeVerdict, bool]:
        """(verdict, came_from_cache)."""
        versions = await self.versions()
        # size None is the reference's production size, fixed by the reference (hashed here): it gets its
        # own name, since the cache's size column is NOT NULL and INSERT OR IGNORE would drop the row
        size = task.size if task.size is not None else PRODUCTION_SIZE
        parts = (source_hash(source), self.reference_hash, task.target, size, versions)
        key = cache_key(*parts)
        hit = self.cache.get(key) if self.cache is not None else self._memory.get(key)
        if hit is not None:
            self.hits += 1
            return hit, True
        if key in self._pending:
            self.hits += 1
            return await asyncio.shield(self._pending[key]), True
        fut: asyncio.Future[NodeVerdict] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            self.misses += 1
            verdict = await self.inner.evaluate(source, task)
            if self.cache is not None:
                self.cache.put(key, parts, verdict)
            elif verdict.status != "failed":
                self._memory[key] = verdict
            fut.set_result(verdict)
            return verdict, False
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            self._pending.pop(key, None)
