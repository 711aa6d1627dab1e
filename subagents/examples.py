"""The prompts' "working examples" section: retrieved example kernels, cut to a stated token budget.

Retrieval happens elsewhere (the server's `find_examples` tool over the example index); this room only
lays out what it is given, so it stays free of I/O. Tokens are estimated as ceil(characters / 4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

# Prompt budget for the examples section, per role (estimated tokens, characters / 4).
EXAMPLES_BUDGET_TOKENS: dict[str, int] = {"planner": 2000, "implementer": 2000, "debugger": 1500}
MAX_EXAMPLES = 3
# Retrieval asks for up to MAX_EXAMPLES but keeps only hits scoring at least this fraction of the best.
MIN_SCORE_RATIO = 0.4
_SECTION_OVERHEAD_TOKENS = 160  # heading, the one-paragraph preface and per-example titles


def tokens(text: str) -> int:
    """Estimated tokens: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


def retrieval_budget(role: str) -> int:
    """What to ask the retriever for, so its excerpts plus this section's own text fit the role's budget."""
    return max(200, EXAMPLES_BUDGET_TOKENS[role] - _SECTION_OVERHEAD_TOKENS)


def _field(hit: Any, name: str, default: Any = "") -> Any:
    if isinstance(hit, BaseModel):
        return getattr(hit, name, default)
    if isinstance(hit, Mapping):
        return hit.get(name, default)
    return default


def _cut(text: str, limit_chars: int) -> str:
    if len(text) <= limit_chars:
        return text
    cut = text[: max(0, limit_chars - 40)]
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    fence = "\n```" if cut.count("```") % 2 else ""
    return f"{cut}\n[... cut to the prompt's budget]{fence}"


def render_examples_section(
    examples: Sequence[Any] | None,
    budget_tokens: int,
    *,
    skip_guide_titles: Iterable[str] = (),
) -> str:
    """Up to three retrieved examples as a markdown section of at most `budget_tokens` (estimated).

    Each example names its source (jax version, our reference, the user's file) and its resource uri.
    Guide hits whose section the prompt already carries are dropped. Empty input gives "".
    """
    skip = set(skip_guide_titles)
    hits = [
        h
        for h in (examples or [])
        if _field(h, "excerpt") and not (_field(h, "kind") == "guide" and _field(h, "name") in skip)
    ][:MAX_EXAMPLES]
    if not hits:
        return ""
    head = (
        f"## Working examples (best {len(hits)} retrieved; section budget {budget_tokens} tokens, "
        "estimated as characters / 4)\n\n"
        "Working Pallas TPU code chosen for this task or error. Borrow their patterns (grid order, "
        "BlockSpecs and index maps, scratch accumulators, pl.when, compiler params), not their shapes.\n"
    )
    left = budget_tokens * 4 - len(head)
    parts = [head]
    for i, h in enumerate(hits):
        title = (
            f"\n### {i + 1}. {_field(h, 'name')} ({_field(h, 'source')} {_field(h, 'version')}; "
            f"{_field(h, 'where') or _field(h, 'path')}; full text: {_field(h, 'uri')})\n\n"
        )
        weights = list(range(len(hits) - i, 0, -1))  # the best match gets the largest share
        share = left * weights[0] // sum(weights)
        if share <= len(title) + 80:
            break
        body = _cut(str(_field(h, "excerpt")).strip(), share - len(title) - 1) + "\n"
        parts.append(title + body)
        left -= len(title) + len(body)
    if len(parts) == 1:
        return ""
    return "".join(parts)
