"""The offline walk's next move, read from the compiler's utilization (`maxkernel analyze` / analyze_kernel).

The static estimate ranks configs by time; the compiler's schedule says *why* a kernel is slow. An MXU
busy in few of the loop's bundles calls for larger blocks (more matmul per grid step); spills call
for smaller ones (the block's live values overflow the vector registers). Moves in the preferred
direction rank ahead of the others among the walk's untried neighbours.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

# Below this fraction of the loop's bundles issuing on the MXU, a matmul kernel is under-feeding it.
MXU_UNDERUSED = 0.5

Direction = Literal["grow", "shrink"]
_MXU_TEXT = re.compile(r"MXU busy in (\d+(?:\.\d+)?)%")
_SPILL_TEXT = re.compile(r"(\d+) spill stores")


@dataclass(frozen=True)
class Utilization:
    mxu_busy: float | None
    spill_stores: int

    @property
    def direction(self) -> Direction | None:
        if self.spill_stores > 0:
            return "shrink"
        if self.mxu_busy is not None and self.mxu_busy < MXU_UNDERUSED:
            return "grow"
        return None

    def evidence(self) -> list[str]:
        out = [f"MXU busy in {self.mxu_busy:.0%} of the loop's bundles"] if self.mxu_busy is not None else []
        return out + ([f"{self.spill_stores} spill stores"] if self.spill_stores else [])


def _from_json(text: str) -> Utilization | None:
    for m in re.finditer(r"\{.*\}", text, re.S):
        try:
            data: Any = json.loads(m.group(0))
        except ValueError:
            continue
        kernels = data.get("kernels") if isinstance(data, dict) else None
        if kernels:
            k = kernels[0]
            return Utilization(k.get("utilization", {}).get("MXU"), int(k.get("spill_stores") or 0))
    return None


def parse_utilization(text: str) -> Utilization | None:
    """The first kernel's MXU busy fraction and spill count, from an analysis summary or report JSON."""
    found = _from_json(text) if '"kernels"' in text else None
    if found is not None:
        return found
    mxu = _MXU_TEXT.search(text)
    spill = _SPILL_TEXT.search(text)
    if not mxu and not spill:
        return None
    return Utilization(float(mxu.group(1)) / 100 if mxu else None, int(spill.group(1)) if spill else 0)


def advice(u: Utilization) -> str | None:
    if u.direction == "shrink":
        return f"{u.spill_stores} spill stores in the compiler's schedule: use smaller blocks"
    if u.direction == "grow":
        return f"MXU busy in only {u.mxu_busy:.0%} of the loop's bundles: use larger blocks"
    return None


def _block_growth(base: dict, cand: dict) -> float:
    """log2 of how much bigger the candidate's blocks are (0: same blocks)."""
    g = 0.0
    for k, v in cand.items():
        w = base.get(k)
        if k.startswith("block") and isinstance(v, int) and isinstance(w, int) and v > 0 and w > 0:
            g += math.log2(v / w)
    return g


def move_rank(base: dict, cand: dict, u: Utilization | None) -> int:
    """0 for a move the utilization asks for, 1 otherwise (and 0 for all when it asks for nothing)."""
    if u is None or u.direction is None:
        return 0
    g = _block_growth(base, cand)
    return 0 if (g > 0 if u.direction == "grow" else g < 0) else 1
