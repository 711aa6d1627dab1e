"""Graph search over candidate kernels: parallel chains, beam search, and an island evolutionary search.

Every decision is a function of what the store holds (finished verdicts) and of seeds derived from
node ids, and every proposal is recorded under a key (parent, strategy, attempt). So a resumed search
replays its own decisions without asking the proposer again and without re-evaluating a finished
node: it only does the work that was in flight when the process died, then carries on.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.clients.fleet.engine import Engine
from maxkernel.clients.models import Budget, BudgetExceeded, Ledger
from maxkernel.clients.search.evaluator import CachedEvaluator, EvalTask, NoEvaluators
from maxkernel.clients.search.graph import Node, NodeVerdict, make_node, sha256_text
from maxkernel.clients.search.proposer import Proposal, Proposer
from maxkernel.clients.search.store import GraphStore
from maxkernel.clients.search.strategies import Strategy, resolve

Algorithm = Literal["parallel", "beam", "evolve"]


class SearchSettings(BaseModel):
    algorithm: Algorithm = "beam"
    strategies: list[str] = Field(default_factory=list, description="catalogue names or free text; [] = all")
    max_evaluations: int = Field(default=40, ge=1, description="evaluations (cache misses) before stopping")
    seed: int = 0
    # parallel
    runs: int = Field(default=4, ge=1)
    steps: int = Field(default=6, ge=1)
    # beam
    beam_size: int = Field(default=2, ge=1)
    branches: int = Field(default=3, ge=1)
    depth: int = Field(default=6, ge=1)
    require_improvement: bool = True
    patience: int = Field(default=2, ge=0, description="beam: extra rounds at a depth when nothing improved")
    # evolve
    islands: int = Field(default=2, ge=1)
    population: int = Field(default=6, ge=2)
    offspring: int = Field(default=3, ge=1, description="evolve: children per island per generation")
    generations: int = Field(default=12, ge=1)
    migrate_every: int = Field(default=3, ge=1)
    combine_rate: float = Field(default=0.3, ge=0.0, le=1.0)
    # end
    reverify: int = Field(default=1, ge=0, description="winners re-evaluated with new seeds")
    reverify_seeds: int = Field(default=8, ge=1, le=16)


class SearchResult(BaseModel):
    best: Node | None
    reverified: dict[str, Any] | None
    evaluations: int
    cache_hits: int
    nodes: int
    stopped: str
    requeued_on_start: int


class StopSearch(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def seeded(*parts: Any) -> random.Random:
    return random.Random(int(sha256_text("|".join(map(str, parts)))[:12], 16))


def faster(a: Node, b: Node | None) -> bool:
    return a.time_us is not None and (b is None or b.time_us is None or a.time_us < b.time_us)


def rank_key(n: Node) -> tuple[float, str]:
    return (n.time_us if n.time_us is not None else float("inf"), n.id)


class Search:
    def __init__(
        self,
        store: GraphStore,
        evaluator: CachedEvaluator,
        proposer: Proposer,
        task: EvalTask,
        settings: SearchSettings,
        *,
        ledger: Ledger | None = None,
        budget: Budget | None = None,
        dispatcher: Engine | None = None,
    ) -> None:
        self.store, self.evaluator, self.proposer, self.task, self.s = (
            store,
            evaluator,
            proposer,
            task,
            settings,
        )
        self.ledger, self.budget = ledger or Ledger(), budget
        self.dispatcher = dispatcher
        self.strategies: list[Strategy] = resolve(settings.strategies)
        self.lock = asyncio.Lock()
        # 'running' in the store means in flight: at most `concurrency` nodes at once
        self.slots = asyncio.Semaphore(getattr(dispatcher, "concurrency", 2))

    # ---- bookkeeping
    def evaluations(self) -> int:
        return sum(1 for n in self.store.nodes() if n.finished and not n.cached)

    def committed(self) -> int:
        """Evaluations done or already queued (pending/running): the budget never overshoots."""
        return sum(1 for n in self.store.nodes() if not n.cached)

    def check_budget(self) -> None:
        if self.committed() >= self.s.max_evaluations:
            raise StopSearch(f"max_evaluations={self.s.max_evaluations} reached")
        if self.budget is not None:
            try:
                self.budget.check(self.ledger)
            except BudgetExceeded as e:
                raise StopSearch(str(e)) from None

    def best(self) -> Node | None:
        valid = self.store.nodes("valid")
        return min(valid, key=rank_key) if valid else None

    # ---- nodes
    async def add(
        self, key: str, parent: Node | None, make: Any, strategy: str | None, second: Node | None = None
    ):
        """The node `key` produced before (replay), else ask `make()` for a Proposal and store its node."""
        known, nid = self.store.proposal(key)
        if known:
            return self.store.get(nid) if nid else None
        self.check_budget()
        try:
            p: Proposal | None = await make()
        except BudgetExceeded as e:
            raise StopSearch(str(e)) from None
        if p is None:
            self.store.set_proposal(key, None)
            return None
        node = make_node(
            p.source,
            parent,
            strategy=strategy,
            second_parent=second,
            plan=p.plan,
            config=p.config,
            cost_usd=p.cost_usd,
        )
        node, _ = self.store.add(node, p.source, proposal_key=key)
        return node

    async def derive(self, parent: Node, strategy: Strategy, attempt: int = 0) -> Node | None:
        key = f"derive|{parent.id}|{strategy.name}|{attempt}"
        rng = seeded(self.s.seed, key)
        src = self.store.source(parent.source_hash)
        return await self.add(
            key, parent, lambda: self.proposer.derive(parent, src, strategy, rng), strategy.name
        )

    def usable(self, node: Node) -> list[Strategy]:
        """Strategies the proposer can apply to `node` (a model can try any; a template only its keys)."""
        applies = getattr(self.proposer, "applies", None)
        out = [s for s in self.strategies if applies is None or applies(node, s)]
        return out or list(self.strategies)

    def novel(self, node: Node | None, key: str) -> bool:
        """This proposal made a kernel no earlier proposal made (from recorded order: replay-stable)."""
        return (
            node is not None
            and self.store.first_with_source(node.source_hash) == node.id
            and self.store.first_proposal(node.id) == key
        )

    async def fresh_child(
        self, parent: Node, order: list[Strategy], attempt: int, tries: int = 3
    ) -> Node | None:
        """The first child, over `order` and a few attempts, whose kernel the graph has not seen."""
        for t in range(tries):
            for k, strat in enumerate(order):
                a = attempt * 100 + t * len(order) + k
                child = await self.derive(parent, strat, attempt=a)
                if self.novel(child, f"derive|{parent.id}|{strat.name}|{a}"):
                    return child
        return None

    async def combine(self, a: Node, b: Node, attempt: int = 0) -> Node | None:
        key = f"combine|{a.id}|{b.id}|{attempt}"
        rng = seeded(self.s.seed, key)
        sa, sb = self.store.source(a.source_hash), self.store.source(b.source_hash)
        return await self.add(key, a, lambda: self.proposer.combine(a, sa, b, sb, rng), "combine", second=b)

    async def evaluate(self, node: Node) -> Node:
        async with self.slots:
            return await self._evaluate(node)

    async def _evaluate(self, node: Node) -> Node:
        node = self.store.get(node.id)
        if node.finished:
            return node
        async with self.lock:  # two parents may derive the same child: evaluate it once
            node = self.store.get(node.id)
            if node.status == "running":
                pass
            elif node.finished:
                return node
            self.store.start(node.id)
        try:
            verdict, cached = await self.evaluator.evaluate(self.store.source(node.source_hash), self.task)
        except NoEvaluators:
            self.store.release(node.id)
            raise
        except asyncio.CancelledError:
            self.store.release(node.id)
            raise
        except Exception as e:
            verdict, cached = NodeVerdict(status="failed", failure=f"{type(e).__name__}: {e}"[:2000]), False
        return self.store.finish(node.id, verdict, cached=cached)

    async def evaluate_all(self, nodes: list[Node | None]) -> list[Node]:
        unique = list({n.id: n for n in nodes if n is not None}.values())
        return list(await asyncio.gather(*(self.evaluate(n) for n in unique)))

    # ---- the run
    async def run(self) -> SearchResult:
        requeued = self.store.requeued
        self.store.set_meta("settings", self.s.model_dump())
        self.store.set_meta("task", self.task.model_dump())
        self.store.set_meta("started_at", self.store.get_meta("started_at") or time.time())
        stopped = "finished"
        try:
            await self.evaluate_all(self.store.nodes("pending"))  # what a killed process left in flight
            root = await self.add("root", None, self.proposer.root, None)
            assert root is not None
            self.store.set_meta("root", root.id)
            root = await self.evaluate(root)
            algo = {"parallel": self.parallel, "beam": self.beam, "evolve": self.evolve}[self.s.algorithm]
            await algo(root)
        except StopSearch as e:
            stopped = e.reason
        except NoEvaluators as e:
            stopped = f"no evaluators left: {e}"
        try:  # proposals already inside the budget, cut off by the stop: judge them
            await self.evaluate_all(self.store.nodes("pending"))
        except NoEvaluators as e:
            stopped = f"no evaluators left: {e}"
        reverified = await self.reverify() if "no evaluators" not in stopped else None
        self.store.set_meta("stopped", stopped)
        self.store.set_meta("finished_at", time.time())
        self.store.set_meta("ledger", self.ledger.model_dump(mode="json"))
        nodes = self.store.nodes()
        return SearchResult(
            best=self.best(),
            reverified=reverified,
            evaluations=sum(1 for n in nodes if n.finished and not n.cached),
            cache_hits=sum(1 for n in nodes if n.cached),
            nodes=len(nodes),
            stopped=stopped,
            requeued_on_start=requeued,
        )

    async def reverify(self) -> dict[str, Any] | None:
        """Re-evaluate the best nodes from scratch (no cache) with more seeds; the first that holds wins."""
        if self.s.reverify <= 0:
            return None
        done = self.store.get_meta("reverified")
        if done:
            return done
        inner = self.dispatcher or self.evaluator.inner
        for node in sorted(self.store.nodes("valid"), key=rank_key)[: self.s.reverify]:
            try:
                v = await inner.evaluate(
                    self.store.source(node.source_hash), self.task, seeds=self.s.reverify_seeds
                )
            except NoEvaluators:
                return None
            entry = {
                "node_id": node.id,
                "seeds": self.s.reverify_seeds,
                "verdict": v.model_dump(mode="json"),
                "holds": v.status == "valid",
            }
            self.store.record_event("reverified", node.id, {"status": v.status, "time_us": v.time_us})
            if v.status == "valid":
                self.store.set_meta("reverified", entry)
                return entry
        return None

    # ---- algorithms
    async def parallel(self, root: Node) -> None:
        """N independent chains from the root, each led by its own strategy; the best node wins."""

        async def chain(i: int) -> None:
            lead = self.strategies[i % len(self.strategies)]
            current = root
            for step in range(self.s.steps):
                rng = seeded(self.s.seed, "parallel", i, step)
                usable = self.usable(current)
                first = lead if lead in usable and rng.random() < 0.6 else rng.choice(usable)
                child = await self.fresh_child(
                    current, [first] + [x for x in usable if x != first], i * 1000 + step
                )
                if child is None:
                    continue
                child = await self.evaluate(child)
                if child.status == "valid" and (current.status != "valid" or faster(child, current)):
                    current = child

        if root.status != "valid":
            raise StopSearch("the root kernel is not valid: nothing to improve on")
        results = await asyncio.gather(*(chain(i) for i in range(self.s.runs)), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def pick_strategies(self, node: Node, branch: int, retry: int) -> list[Strategy]:
        """Branch b of `node` leads with the b-th strategy of a per-node shuffle; the rest are fallbacks."""
        order = self.usable(node)
        seeded(self.s.seed, "pick", node.id, retry).shuffle(order)
        k = branch % len(order)
        return order[k:] + order[:k]

    async def beam(self, root: Node) -> None:
        """Expand the best `beam_size` valid nodes by `branches` strategies per depth."""
        if root.status != "valid":
            raise StopSearch("the root kernel is not valid: nothing to improve on")
        beam, depth, retry = [root], 0, 0
        while depth < self.s.depth:
            tries = [(p, b) for p in beam for b in range(self.s.branches)]
            children = await asyncio.gather(
                *(
                    self.fresh_child(p, self.pick_strategies(p, b, retry), attempt=retry * 10 + b)
                    for p, b in tries
                )
            )
            pairs = [(p, c) for (p, _), c in zip(tries, children, strict=True) if c is not None]
            await self.evaluate_all([c for _, c in pairs])
            admitted: dict[str, Node] = {}
            for parent, c in pairs:
                c = self.store.get(c.id)
                if c.status != "valid":
                    continue  # the beam never admits an invalid node
                if self.s.require_improvement and not faster(c, parent):
                    continue
                admitted[c.id] = c
            self.store.record_event(
                "beam", None, {"depth": depth, "retry": retry, "admitted": sorted(admitted)}
            )
            if not admitted:
                retry += 1
                if retry > self.s.patience or not pairs:
                    raise StopSearch(f"beam: no child improved on its parent at depth {depth}")
                continue
            beam = sorted(admitted.values(), key=rank_key)[: self.s.beam_size]
            depth, retry = depth + 1, 0

    async def evolve(self, root: Node) -> None:
        """Island populations: tournament parents with a diversity penalty, mutate or combine, keep elites."""
        if root.status != "valid":
            raise StopSearch("the root kernel is not valid: nothing to improve on")
        islands: list[list[Node]] = [[root] for _ in range(self.s.islands)]
        picked: dict[str, int] = {}
        stale = 0
        for gen in range(self.s.generations):
            plans: list[tuple[int, Any]] = []
            for i, pop in enumerate(islands):
                rng = seeded(self.s.seed, "evolve", gen, i)
                for slot in range(self.s.offspring):
                    a = self._tournament(pop, rng, picked)
                    picked[a.id] = picked.get(a.id, 0) + 1
                    if len(pop) > 1 and rng.random() < self.s.combine_rate:
                        b = self._tournament([n for n in pop if n.id != a.id], rng, picked)
                        plans.append((i, self.combine(a, b, attempt=gen * 100 + slot)))
                    else:
                        usable = self.usable(a)
                        rng.shuffle(usable)
                        plans.append((i, self.fresh_child(a, usable, attempt=gen * 100 + slot, tries=1)))
            children = await asyncio.gather(*(c for _, c in plans))
            done = {n.id: n for n in await self.evaluate_all(list(children))}
            new_valid = 0
            for (i, _), c in zip(plans, children, strict=True):
                if c is None or done[c.id].status != "valid":
                    continue
                pop_ids = {n.source_hash for n in islands[i]}
                if done[c.id].source_hash not in pop_ids:
                    islands[i].append(done[c.id])
                    new_valid += 1
            islands = [sorted(pop, key=rank_key)[: self.s.population] for pop in islands]
            if gen % self.s.migrate_every == self.s.migrate_every - 1 and len(islands) > 1:
                bests = [pop[0] for pop in islands]  # ring migration of each island's elite
                for i, pop in enumerate(islands):
                    m = bests[i - 1]
                    if m.source_hash not in {n.source_hash for n in pop}:
                        pop.append(m)
            self.store.record_event("generation", None, {"gen": gen, "best": [p[0].id for p in islands]})
            stale = stale + 1 if new_valid == 0 else 0
            if stale >= 3:
                raise StopSearch(f"evolve: no new valid kernel for 3 generations (at {gen + 1})")

    @staticmethod
    def _tournament(pop: list[Node], rng: random.Random, picked: dict[str, int], k: int = 3) -> Node:
        """Fitness = speed; a node already used as a parent often scores lower (diversity)."""
        entrants = [rng.choice(pop) for _ in range(min(k, len(pop)))]

        def score(n: Node) -> float:
            return (n.time_us or float("inf")) * (1.0 + 0.15 * picked.get(n.id, 0))

        return min(entrants, key=score)
