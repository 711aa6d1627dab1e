"""What a run spent on models, and the budget that stops it.

A `Ledger` is the per-run record of every model call (role, model, tokens, cost, latency); it
serializes to JSON for the run store and reports. A `Budget` holds the user's limits; the loop calls
`budget.check(ledger)` before each model call (or wraps the model in `MeteredModel`, which does both).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from maxkernel.clients.models.base import Message, Model, ModelResponse, ModelSettings, Usage


class LedgerEntry(BaseModel):
    """One model call. `cost_usd` is None when the model's price is unknown."""

    model_config = ConfigDict(frozen=True)

    role: str  # who asked: e.g. "planner", "coder", "reviewer"
    model: str
    usage: Usage
    cost_usd: float | None
    latency_ms: float = Field(ge=0.0)


class Ledger(BaseModel):
    """Every model call of one run, in order. `started_at_s` is wall-clock epoch seconds."""

    started_at_s: float = Field(default_factory=time.time)
    entries: list[LedgerEntry] = []

    def record(self, role: str, response: ModelResponse, latency_ms: float) -> LedgerEntry:
        entry = LedgerEntry(
            role=role,
            model=response.model,
            usage=response.usage,
            cost_usd=response.cost_usd,
            latency_ms=latency_ms,
        )
        self.entries.append(entry)
        return entry

    @property
    def calls(self) -> int:
        return len(self.entries)

    @property
    def total_usage(self) -> Usage:
        return sum((e.usage for e in self.entries), Usage())

    @property
    def total_cost_usd(self) -> float:
        """Sum of known costs; a lower bound when `unpriced_calls` > 0."""
        return sum(e.cost_usd for e in self.entries if e.cost_usd is not None)

    @property
    def unpriced_calls(self) -> int:
        return sum(1 for e in self.entries if e.cost_usd is None)

    def elapsed_minutes(self, now_s: float | None = None) -> float:
        return ((time.time() if now_s is None else now_s) - self.started_at_s) / 60.0

    def by_role(self) -> dict[str, Usage]:
        totals: dict[str, Usage] = {}
        for e in self.entries:
            totals[e.role] = totals.get(e.role, Usage()) + e.usage
        return totals

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> Ledger:
        return cls.model_validate_json(text)


class BudgetExceeded(Exception):
    """A run hit one of its budget limits; the message names the limit and the spend so far."""

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit  # "max_usd" | "max_tokens" | "max_minutes"


class Budget(BaseModel):
    """Limits for one run; None means unlimited. A limit is hit once spend reaches it."""

    model_config = ConfigDict(frozen=True)

    max_usd: float | None = Field(default=None, ge=0.0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_minutes: float | None = Field(default=None, ge=0.0)

    def check(self, ledger: Ledger, *, now_s: float | None = None) -> None:
        """Raise BudgetExceeded if the run may not make another model call."""
        spent, tokens = ledger.total_cost_usd, ledger.total_usage.total_tokens
        minutes = ledger.elapsed_minutes(now_s)
        so_far = f"spent so far: ${spent:.4f}, {tokens:,} tokens, {minutes:.1f} min, {ledger.calls} calls"
        if ledger.unpriced_calls:
            so_far += f" ({ledger.unpriced_calls} calls with unknown price not counted in $)"
        if self.max_usd is not None and spent >= self.max_usd:
            raise BudgetExceeded(f"budget max_usd=${self.max_usd:.2f} reached; {so_far}", limit="max_usd")
        if self.max_tokens is not None and tokens >= self.max_tokens:
            raise BudgetExceeded(
                f"budget max_tokens={self.max_tokens:,} reached; {so_far}", limit="max_tokens"
            )
        if self.max_minutes is not None and minutes >= self.max_minutes:
            raise BudgetExceeded(
                f"budget max_minutes={self.max_minutes:g} reached; {so_far}", limit="max_minutes"
            )


class MeteredModel(Model):
    """Wraps a model: checks the budget before each call and records the call in the ledger after."""

    def __init__(
        self,
        model: Model,
        ledger: Ledger,
        *,
        role: str,
        budget: Budget | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model, self.ledger, self.role, self.budget, self.clock = model, ledger, role, budget, clock
        self.name = model.name

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        if self.budget is not None:
            self.budget.check(self.ledger)
        start = self.clock()
        response = await self.model.request(messages, settings)
        self.ledger.record(self.role, response, latency_ms=(self.clock() - start) * 1000.0)
        return response
