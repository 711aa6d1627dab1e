"""Per-model token prices, so a run's ledger can show what it spent.

An editable ESTIMATE: standard (non-batch, uncached) text list prices in USD per 1M tokens as the
providers published them around PRICES_AS_OF. Prices change; check the providers' pricing pages and
edit `PRICES` (or pass your own table). A model not in the table has an unknown cost (None): we never
invent a number. Names match exactly (after dropping a `models/` prefix), so a dated or preview
variant that is not listed stays unknown rather than borrowing a neighbour's price.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from maxkernel.clients.models.base import Usage

PRICES_AS_OF = "2025-11"


class Price(BaseModel):
    """USD per 1M tokens. Some models charge more for every token of a request whose prompt is long."""

    model_config = ConfigDict(frozen=True)

    input_usd_per_mtok: float = Field(ge=0.0)
    output_usd_per_mtok: float = Field(ge=0.0)
    long_prompt_tokens: int | None = None  # prompts above this many tokens use the *_long prices
    long_input_usd_per_mtok: float | None = None
    long_output_usd_per_mtok: float | None = None


PRICES: dict[str, Price] = {
    # Gemini Developer API (ai.google.dev pricing); output includes thinking tokens.
    "gemini-3-pro-preview": Price(
        input_usd_per_mtok=2.00,
        output_usd_per_mtok=12.00,
        long_prompt_tokens=200_000,
        long_input_usd_per_mtok=4.00,
        long_output_usd_per_mtok=18.00,
    ),
    "gemini-2.5-pro": Price(
        input_usd_per_mtok=1.25,
        output_usd_per_mtok=10.00,
        long_prompt_tokens=200_000,
        long_input_usd_per_mtok=2.50,
        long_output_usd_per_mtok=15.00,
    ),
    "gemini-2.5-flash": Price(input_usd_per_mtok=0.30, output_usd_per_mtok=2.50),
    "gemini-2.5-flash-lite": Price(input_usd_per_mtok=0.10, output_usd_per_mtok=0.40),
    "gemini-2.0-flash": Price(input_usd_per_mtok=0.10, output_usd_per_mtok=0.40),
    "gemini-2.0-flash-lite": Price(input_usd_per_mtok=0.075, output_usd_per_mtok=0.30),
    # OpenAI API (only applied when talking to api.openai.com; other endpoints have their own prices).
    "gpt-5": Price(input_usd_per_mtok=1.25, output_usd_per_mtok=10.00),
    "gpt-5-mini": Price(input_usd_per_mtok=0.25, output_usd_per_mtok=2.00),
    "gpt-5-nano": Price(input_usd_per_mtok=0.05, output_usd_per_mtok=0.40),
    "gpt-4.1": Price(input_usd_per_mtok=2.00, output_usd_per_mtok=8.00),
    "gpt-4.1-mini": Price(input_usd_per_mtok=0.40, output_usd_per_mtok=1.60),
    "gpt-4.1-nano": Price(input_usd_per_mtok=0.10, output_usd_per_mtok=0.40),
    "gpt-4o": Price(input_usd_per_mtok=2.50, output_usd_per_mtok=10.00),
    "gpt-4o-mini": Price(input_usd_per_mtok=0.15, output_usd_per_mtok=0.60),
    "o3": Price(input_usd_per_mtok=2.00, output_usd_per_mtok=8.00),
    "o4-mini": Price(input_usd_per_mtok=1.10, output_usd_per_mtok=4.40),
}


def price_for(model: str, table: Mapping[str, Price] | None = None) -> Price | None:
    """The price entry for `model` (exact name, `models/` prefix ignored), or None if unknown."""
    table = PRICES if table is None else table
    return table.get(model.removeprefix("models/"))


def cost_usd(model: str, usage: Usage, table: Mapping[str, Price] | None = None) -> float | None:
    """USD cost of one request's `usage` on `model`; None when the model's price is unknown."""
    price = price_for(model, table)
    if price is None:
        return None
    input_rate, output_rate = price.input_usd_per_mtok, price.output_usd_per_mtok
    if price.long_prompt_tokens is not None and usage.input_tokens > price.long_prompt_tokens:
        input_rate = (
            price.long_input_usd_per_mtok if price.long_input_usd_per_mtok is not None else input_rate
        )
        output_rate = (
            price.long_output_usd_per_mtok if price.long_output_usd_per_mtok is not None else output_rate
        )
    return (usage.input_tokens * input_rate + usage.output_tokens * output_rate) / 1_000_000
