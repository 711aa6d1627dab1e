"""Where new candidates come from: a parent plus a strategy (or two parents) -> a new kernel source.

`TemplateProposer` walks a config space (the strategy's hook moves one tunable) and renders modules;
no model is called. `ModelProposer` asks the implementer role of any `Model` (a real provider, the
offline model, a scripted test model), metered by the run's Ledger and Budget. The strategy's
instruction carries a `[strategy: NAME]` tag and the parent's `# maxkernel-config:` line travels in
its source, which is what the offline model needs to apply the same hook.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from pydantic import BaseModel

from maxkernel.clients.models import Budget, Ledger, Message, MeteredModel, Model, ModelError
from maxkernel.clients.search.graph import Node
from maxkernel.clients.search.strategies import Strategy, crossover
from maxkernel.clients.search.templates import TemplateSpace, read_config


class Proposal(BaseModel):
    source: str
    plan: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    cost_usd: float = 0.0
    note: str = ""


class Proposer(Protocol):
    async def root(self) -> Proposal: ...

    async def derive(
        self, parent: Node, source: str, strategy: Strategy, rng: random.Random
    ) -> Proposal | None:
        """A child of `parent` by `strategy`, or None when the strategy does not apply."""
        ...

    async def combine(
        self, a: Node, a_src: str, b: Node, b_src: str, rng: random.Random
    ) -> Proposal | None: ...


class TemplateProposer:
    def __init__(self, space: TemplateSpace, initial: dict[str, Any] | None = None) -> None:
        self.space, self.initial = space, initial or space.initial

    def applies(self, parent: Node, strategy: Strategy) -> bool:
        return bool(parent.config) and bool(strategy.applicable(parent.config, self.space.space))

    def _proposal(self, config: dict[str, Any], note: str) -> Proposal | None:
        if not self.space.allowed(config):
            return None
        return Proposal(source=self.space.render(config), config=config, plan={"config": config}, note=note)

    async def root(self) -> Proposal:
        p = self._proposal(dict(self.initial), "initial config")
        assert p is not None, "the initial config is not allowed by its space"
        return p

    async def derive(
        self, parent: Node, source: str, strategy: Strategy, rng: random.Random
    ) -> Proposal | None:
        base = parent.config or read_config(source)
        if base is None:
            return None
        for _ in range(4):  # a move may land outside the allowed set; try a few
            new = strategy.mutate(base, self.space.space, rng)
            if new is None:
                return None
            p = self._proposal(new, f"{strategy.name}: {_diff(base, new)}")
            if p is not None:
                return p
        return None

    async def combine(self, a: Node, a_src: str, b: Node, b_src: str, rng: random.Random) -> Proposal | None:
        ca, cb = a.config or read_config(a_src), b.config or read_config(b_src)
        if ca is None or cb is None:
            return None
        child = crossover(ca, cb, rng)
        return self._proposal(child, f"combine: {_diff(ca, child)}")


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    return ", ".join(f"{k} {a.get(k)}->{b[k]}" for k in b if a.get(k) != b[k]) or "no change"


class NoRootKernel(RuntimeError):
    """The model gave no usable first kernel: the search cannot start (the message says what to do)."""


class ModelProposer:
    """The implementer role of a model writes each child; cost comes from the run's ledger."""

    def __init__(
        self,
        model: Model,
        *,
        task_spec: str,
        chip: Any,
        ledger: Ledger,
        budget: Budget | None = None,
        root_source: str | None = None,
    ) -> None:
        self.model = MeteredModel(model, ledger, role="implementer", budget=budget)
        self.ledger, self.task_spec, self.chip, self.root_source = ledger, task_spec, chip, root_source

    async def prepare(self, server: Any, reference: str, size: str | None, note=None) -> None:
        """The task text the Auto loop's roles read (`task_text`: summary and source, and the traced
        program), built through `server` (an evaluator's MCP connection, or `LocalTaskSource`)."""
        from maxkernel.clients.task_text import task_text

        self.task_spec = await task_text(server, reference, size, self.task_spec, note=note)

    async def _ask(self, plan: str, previous: str | None, feedback: str | None) -> Proposal | None:
        from maxkernel.subagents.parse import OutputParseError, parse_output
        from maxkernel.subagents.render import render_implement_prompt
        from maxkernel.subagents.roles import get_role

        role = get_role("implementer")
        prompt = render_implement_prompt(
            plan, self.task_spec, self.chip, previous_source=previous, feedback=feedback
        )
        before = self.ledger.total_cost_usd
        reply = await self.model.request([Message.system(role.system_prompt), Message.user(prompt)])
        self.last_reply = reply.text
        cost = self.ledger.total_cost_usd - before
        try:
            out = parse_output(role, reply.text)
        except OutputParseError:
            return None
        return Proposal(
            source=out.source,
            plan={"plan": plan},
            config=read_config(out.source),
            cost_usd=cost,
            note=out.notes,
        )

    async def root(self) -> Proposal:
        if self.root_source is not None:
            return Proposal(source=self.root_source, config=read_config(self.root_source), note="given root")
        try:
            p = await self._ask(
                "Write a first correct Pallas TPU kernel for this task; simple tiling.", None, None
            )
        except ModelError as e:  # the model refuses the task (offline: no template fits); Auto stops too
            raise NoRootKernel(
                f"the model wrote no first kernel: {e}; give a root kernel with --root"
            ) from None
        if p is None:
            said = " ".join((getattr(self, "last_reply", "") or "").split())[:200]
            raise NoRootKernel(
                "the model's first kernel could not be parsed"
                + (f" (it said: {said})" if said else "")
                + "; give a root kernel with --root"
            )
        return p

    async def derive(
        self, parent: Node, source: str, strategy: Strategy, rng: random.Random
    ) -> Proposal | None:
        return await self._ask(strategy.prompt_line(), source, None)

    async def combine(self, a: Node, a_src: str, b: Node, b_src: str, rng: random.Random) -> Proposal | None:
        plan = (
            "[strategy: combine] Combine the ideas of two kernels that both passed validation: keep what makes "
            "each fast. The first is the previous version; the second is in the feedback."
        )
        return await self._ask(plan, a_src, f"Second kernel:\n```python\n{b_src}\n```")
