"""Excerpts of example entries cut to a token budget (estimated as characters / 4).

The lines that show an error's fix (e.g. `vmem_limit_bytes=`) come first, then the kernel, its launch
(grid and BlockSpecs) and its helpers; a cut excerpt says where the whole entry is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from maxkernel.tpu_tools.examples.models import ExampleEntry, ExampleHit, tokens


def _trim(text: str, limit_chars: int) -> tuple[str, bool]:
    if len(text) <= limit_chars:
        return text, False
    cut = text[: max(limit_chars, 0)]
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut, True


# feature -> the source text that shows it (an error's fix is in these lines, so they come first)
_FOCUS = {
    "vmem_limit_bytes": r"vmem_limit_bytes",
    "manual_dma": r"make_async_copy|async_copy|\.wait\(|\.start\(",
    "hbm_any": r"memory_space|\bANY\b",
    "scalar_prefetch": r"num_scalar_prefetch|PrefetchScalarGridSpec",
    "dimension_semantics": r"dimension_semantics",
    "pl_when": r"pl\.when",
}


def _focus(e: ExampleEntry, features: Sequence[str], context: int = 3, max_lines: int = 24) -> str:
    """The launching function's lines that show `features` (with a few lines around), or ''."""
    pats = [_FOCUS[f] for f in features if f in _FOCUS and f in e.features]
    lines = (e.wrapper_source or e.call_source).splitlines()
    if not pats or not lines:
        return ""
    rx = re.compile("|".join(pats))
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if rx.search(line):
            keep |= set(range(max(0, i - context), min(len(lines), i + context + 1)))
    out, last = [], -2
    for i in sorted(keep)[:max_lines]:
        if i != last + 1 and out:
            out.append("    ...")
        out.append(lines[i])
        last = i
    return f"# the lines of {e.wrapper} that show {', '.join(f for f in features if f in e.features)}:\n" + (
        "\n".join(out)
    )


def excerpt(e: ExampleEntry, budget_tokens: int, focus: Sequence[str] = ()) -> tuple[str, bool]:
    """Header, then the lines showing `focus` features, the kernel, its launch (grid and BlockSpecs),
    then helpers: cut to the budget."""
    limit = budget_tokens * 4
    head = e.header()
    tail = f"# ... cut to fit; full text: {e.uri}"
    room = limit - len(head) - len(tail) - 24
    if room <= 0:
        return _trim(head, limit)[0], True
    if e.kind == "guide":
        pieces = [e.kernel_source]
    else:
        pieces = [e.kernel_source, f"# launched by {e.wrapper}:\n{e.call_source}", e.helper_source]
        shows = _focus(e, focus)
        if shows:
            pieces.insert(0, shows)
    shown, cut = [], False
    for i, piece in enumerate(p for p in pieces if p.strip()):
        share = room if i else int(room * (0.65 if len(pieces) > 1 else 1.0))
        text, was_cut = _trim(piece, share)
        cut |= was_cut or len(text) < len(piece)
        if text.strip():
            shown.append(text)
            room -= len(text) + 2
        if room <= 40:
            cut = cut or i < len(pieces) - 1
            break
    fence = "" if e.kind == "guide" else "python"
    body = "\n\n".join(shown)
    out = f"{head}\n```{fence}\n{body}\n" + (f"{tail}\n" if cut else "") + "```"
    return out, cut


def make_hits(
    ranked: list[tuple[ExampleEntry, float]], budget_tokens: int, focus: Sequence[str] = ()
) -> list[ExampleHit]:
    hits = []
    left = budget_tokens
    for i, (e, score) in enumerate(ranked):
        # the best match gets the largest share (weights n, n-1, ..., 1); what a short hit leaves over
        # goes to the next ones
        weights = list(range(len(ranked) - i, 0, -1))
        share = left * weights[0] // sum(weights)
        text, cut = excerpt(e, share, focus)
        if tokens(text) > share:
            text, cut = _trim(text, share * 4)[0], True
        left -= tokens(text)
        hits.append(
            ExampleHit(
                id=e.id,
                uri=e.uri,
                kind=e.kind,
                source=e.source,
                version=e.version,
                path=e.path,
                where=e.where or e.path,
                name=e.name,
                what=e.what,
                pattern=e.pattern,
                features=e.features,
                score=round(score, 4),
                excerpt=text,
                excerpt_tokens=tokens(text),
                truncated=cut,
            )
        )
    return hits
