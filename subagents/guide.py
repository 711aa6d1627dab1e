"""The Pallas-on-TPU guide that grounds the planner, implementer and debugger prompts.

The guide is a packaged markdown file split on its `## ` headings, so a prompt can carry only the
sections an error points at.
"""

from __future__ import annotations

import re
from functools import cache

from maxkernel.subagents.roles import read_packaged_text

GUIDE_FILE = ("guides", "pallas_tpu.md")
ERRORS_SECTION = "Common errors and fixes"

# Words in an error or verdict -> guide sections that explain them.
_SECTION_KEYWORDS: dict[str, tuple[str, ...]] = {
    "Layout and tiling": ("layout", "reshape", "relayout", "transpose", "(8,128)", "(8, 128)"),
    "Block shapes: the divisibility rule": (
        "divisible by 8 and 128",
        "block shape",
        "memory space any",
        "rank 1 block",
    ),
    "Grid, BlockSpec and index maps": (
        "index_map",
        "blockspec",
        "block spec",
        "out of bound",
        "out-of-bounds",
    ),
    "Dimension semantics and megacore": ("dimension_semantics", "revisited", "megacore"),
    "Accumulators and pl.when": ("nan", "accumulat", "pl.when", "mismatch", "wrong result", "allclose"),
    "Online softmax (flash attention pattern)": ("softmax", "-inf", "overflow", "attention"),
    "VMEM budgets": ("vmem", "resource_exhausted", "would exceed memory", "scoped"),
    "Dtypes": ("f16", "float16", "i32", "int32", "bad lhs/rhs", "dtype", "pack_subelements", "float64"),
    "Scalar prefetch": ("prefetch", "smem", "scalar"),
    "Manual DMA and semaphores": ("dma", "semaphore", "async_copy", "hang", "timeout", "timed out"),
    "Cost estimates": ("costestimate", "cost_estimate"),
}


@cache
def load_guide() -> str:
    """The whole guide, as markdown."""
    return read_packaged_text(*GUIDE_FILE)


@cache
def guide_sections() -> dict[str, str]:
    """Section title -> section text (heading included), in guide order."""
    parts = re.split(r"(?m)^(?=## )", load_guide())
    out: dict[str, str] = {}
    for part in parts:
        if part.startswith("## "):
            title = part.splitlines()[0][3:].strip()
            out[title] = part.rstrip() + "\n"
    return out


def relevant_guide(text: str, *, always: tuple[str, ...] = (ERRORS_SECTION,)) -> str:
    """The guide sections an error/verdict text points at, plus `always`; the whole guide if none match."""
    sections = guide_sections()
    low = text.lower()
    picked = [t for t, words in _SECTION_KEYWORDS.items() if any(w in low for w in words)]
    if not picked:
        return load_guide()
    wanted = set(picked) | set(always)
    return "\n".join(body for title, body in sections.items() if title in wanted)
