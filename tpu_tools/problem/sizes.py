"""Target size and check sizes: which shapes a kernel is for, and which shapes validation runs at.

The **target size** is the shape the kernel is for (compile, estimate, tune, profile and score use it):
`full` if the reference's SIZES has it, else the largest by element count. The **check sizes** are
where validation interprets the kernel off the chip: `small`, plus one **derived** intermediate size
built here from the reference's own SIZES, so that a kernel written for one shape (hard-coded dims,
zeros above the small rows, a grid that floors away a remainder) fails.

How the derived size is built (`derive_size`), one dimension at a time in SIZES order:
- a dimension grows only if it scales between the reference's sizes (its value differs somewhere),
  is an integer, and is not tied to others (see below); the others are held, each with the reason;
- its grain is the alignment every size shares, capped at the TPU lane width: gcd(values, 128);
- preferred value: the smallest multiple of the grain above small that is not a multiple of small
  (small + grain), so a kernel that floors `dim // block` drops rows; where the grain is small itself
  no such value exists, and the odd multiple 3 x small is used (then 2 x small), never above the
  largest size;
- a value the reference refuses (create_inputs or tracing its workload raises) or one that takes the
  inputs and outputs past the budget (`MAX_GROWTH` x small's elements, at most `MAX_ELEMENTS`) falls
  back to the next value; a dimension with none left is held, saying why;
- tied dimensions stay consistent: where the reference refuses a grown value as it stands, the
  dimensions tied to it in every size are recomputed with it (a product: hidden = heads x head_dim;
  a fixed multiple: out_features = 16 x num_groups) and the tie holds from then on. Ties are only
  hypotheses until the reference refuses without them: two sizes agree by chance too (16p's seq_len
  equals num_heads x head_dim in both).
Pure logic: the caller passes `probe(dims) -> element count` (it raises where the reference refuses).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

DERIVED = "derived"  # the check-size name of the derived intermediate size
DEFAULT_CHECK_SIZES: tuple[str, ...] = ("small", DERIVED)
PRODUCTION = "full"
LANES = 128  # the TPU lane width: the grain a dimension keeps is never coarser
MAX_GROWTH = 8  # the derived size's inputs + outputs stay within this many times small's
MIN_BUDGET_ELEMENTS = 1 << 20  # ... or this many elements, whichever is larger
MAX_ELEMENTS = 1 << 25  # and never more than this (interpret mode on CPU must stay seconds)

Probe = Callable[[dict[str, Any]], int]


class DimChange(BaseModel):
    """One dimension of the derived size: its small value, the value used, and why."""

    small: Any
    value: Any
    why: str


class DerivedSize(BaseModel):
    """The derived intermediate check size, dimension by dimension, with the reasons."""

    base: str = Field(description="the SIZES entry it grows from (small)")
    dims: dict[str, Any] = Field(default_factory=dict, description="the full size dict used")
    grown: dict[str, DimChange] = Field(default_factory=dict, description="dimensions above small")
    held: dict[str, str] = Field(default_factory=dict, description="dimensions kept at small, and why")
    elements: int | None = Field(default=None, description="input + output elements at this size")
    budget_elements: int | None = None
    ok: bool = Field(default=True, description="False: no dimension could grow (`why` says which and why)")
    why: str = ""

    def describe(self) -> str:
        if not self.ok:
            return f"no derived size: {self.why}"
        grown = ", ".join(f"{k}={c.value} (small {c.small})" for k, c in self.grown.items())
        return f"derived from {self.base}: {grown}"


class CheckSize(BaseModel):
    """One size validation runs at: a SIZES entry, or the derived one (with its dims)."""

    name: str
    dims: dict[str, Any] = Field(default_factory=dict)
    derived: DerivedSize | None = None


class SizeCheck(BaseModel):
    """One check that ran, at one size: what it was and how it ended."""

    size: str
    what: str = Field(description="compile | validate")
    ok: bool
    failure_kind: str | None = None
    summary: str = ""
    dims: dict[str, Any] = Field(default_factory=dict)
    detail: str = Field(default="", description="what ran (the compiler, the execution)")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def production_size(sizes: list[str], elements: Callable[[str], int]) -> tuple[str, str]:
    """(name, why): `full` if present, else the size whose inputs have the most elements."""
    if len(sizes) == 1:
        return sizes[0], f"the reference's only size {sizes[0]!r} (the default target)"
    if PRODUCTION in sizes:
        return PRODUCTION, f"the reference's production size {PRODUCTION!r} (the default target)"
    counted = {s: elements(s) for s in sizes}
    best = max(sizes, key=lambda s: counted[s])
    return best, (
        f"the reference's largest size {best!r} ({counted[best]} input elements; it has no "
        f"{PRODUCTION!r}): the default target"
    )


def smallest_size(sizes: list[str], elements: Callable[[str], int]) -> str:
    """`small` if present, else the size whose inputs have the fewest elements."""
    if "small" in sizes or len(sizes) == 1:
        return "small" if "small" in sizes else sizes[0]
    return min(sizes, key=elements)


def _ties(table: dict[str, dict]) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, int]]]:
    """(product ties k -> (i, j): k == i*j in every size; ratio ties k -> (i, c): k == c*i in every size)."""
    rows = list(table.values())
    keys = [k for k in rows[0] if all(_is_int(r.get(k)) for r in rows)]
    varies = {k for k in keys if len({r[k] for r in rows}) > 1}
    product: dict[str, tuple[str, str]] = {}
    for k in varies:
        for a, i in enumerate(keys):
            for j in keys[a + 1 :]:
                if k in (i, j) or not ({i, j} & varies):
                    continue
                if all(r[k] == r[i] * r[j] and r[i] > 1 and r[j] > 1 for r in rows):
                    product.setdefault(k, (i, j))
    ratio: dict[str, tuple[str, int]] = {}
    for k in varies - set(product):
        for i in varies - {k} - set(product):
            if all(r[i] > 0 and r[k] % r[i] == 0 for r in rows):
                cs = {r[k] // r[i] for r in rows}
                c = cs.pop() if len(cs) == 1 else None
                # k follows i: the larger follows the smaller (equal ones: the later follows the earlier)
                if c is not None and (c > 1 or keys.index(k) > keys.index(i)):
                    ratio.setdefault(k, (i, c))
    return product, ratio


def _ladder(small: int, values: list[int]) -> tuple[list[int], str]:
    """The values to try for one dimension, best first, and the grain they keep."""
    largest = max(values)
    grain = math.gcd(*values, LANES)
    out: list[int] = []
    if grain < small and small + grain <= largest:
        out.append(small + grain)  # not a multiple of small: a floored grid drops a remainder
    for m in (3, 2):
        if m * small <= largest and m * small not in out:
            out.append(m * small)
    if not out and largest > small and largest % grain == 0:
        out.append(largest)
    return out, f"grain {grain} (gcd of its sizes and {LANES})"


def _why(small: int, v: int, grain_text: str) -> str:
    if v % small:
        return f"{small} -> {v}: not a multiple of small, keeps the {grain_text}"
    return f"{small} -> {v} = {v // small} x small: every larger value that keeps the {grain_text} is a multiple of small"


def derive_size(table: dict[str, dict], probe: Probe, base: str = "small") -> DerivedSize:
    """The derived intermediate size of a reference's SIZES table (see the module docstring)."""
    out = DerivedSize(base=base)
    if base not in table:
        out.ok, out.why = False, f"the reference has no {base!r} size to grow from (sizes: {list(table)})"
        return out
    if len(table) < 2:
        out.ok, out.why = False, f"the reference has only one size ({base!r}): nothing says which dims scale"
        return out
    small = dict(table[base])
    out.dims = dict(small)
    try:
        base_elements = probe(small)
    except Exception as e:  # noqa: BLE001 - the reference's own failure at small is reported elsewhere
        out.ok, out.why = False, f"the reference fails at {base!r}: {type(e).__name__}: {e}"[:500]
        return out
    budget = min(MAX_ELEMENTS, max(MAX_GROWTH * base_elements, MIN_BUDGET_ELEMENTS))
    out.budget_elements = budget
    product, ratio = _ties(table)
    rows = list(table.values())
    active: set[str] = set()  # dependents whose tie the reference has shown it needs

    def tied(dims: dict, on: set[str]) -> dict:
        dims = dict(dims)
        for _ in range(3):  # chains (a tie on a tie) settle in a few passes
            for k in on:
                if k in product:
                    i, j = product[k]
                    dims[k] = dims[i] * dims[j]
                else:
                    i, c = ratio[k]
                    dims[k] = c * dims[i]
        return dims

    def ties_of(k: str) -> set[str]:
        """The dependents a change of k moves, were their ties real."""
        return {d for d, (i, j) in product.items() if k in (i, j)} | {
            d for d, (i, _) in ratio.items() if i == k
        }

    dims, elements = dict(small), base_elements
    for k, v in small.items():
        if not _is_int(v):
            out.held[k] = "not an integer dimension" if k != "dtype" else "the dtype, not a dimension"
            continue
        if any(k not in r for r in rows):
            out.held[k] = "not in every SIZES entry"
            continue
        if k in active:
            continue  # recomputed from the dimensions it is tied to
        values = [int(r[k]) for r in rows]
        if len(set(values)) == 1:
            out.held[k] = f"{v} in every SIZES entry: the reference fixes it"
            continue
        ladder, grain_text = _ladder(int(v), values)
        if not ladder:
            out.held[k] = f"no larger size has it above {v}"
            continue
        reasons: list[str] = []
        extra = ties_of(k) - active
        for value in ladder:
            accepted = None
            # first as it stands; where the reference refuses, with the ties a change of k would move
            for on in (active, active | extra) if extra else (active,):
                trial = tied(dims | {k: value}, on)
                try:
                    n = probe(trial)
                except Exception as e:  # noqa: BLE001 - the reference refuses this shape
                    reasons.append(f"{value}: the reference refuses it ({type(e).__name__}: {str(e)[:120]})")
                    continue
                if n > budget:
                    reasons.append(f"{value}: {n} elements, over the budget of {budget}")
                    break
                accepted = (trial, n, on)
                break
            if accepted is not None:
                dims, elements, active = accepted[0], accepted[1], set(accepted[2])
                out.grown[k] = DimChange(small=v, value=value, why=_why(int(v), value, grain_text))
                break
        else:
            out.held[k] = "held at small: " + "; ".join(reasons)
    for k in active:
        out.grown.pop(k, None)
        out.held.pop(k, None)
        if k in product:
            rel = f"{product[k][0]} x {product[k][1]}"
        else:
            rel = f"{ratio[k][1]} x {ratio[k][0]}"
        if dims.get(k) != small.get(k):
            out.grown[k] = DimChange(
                small=small[k], value=dims[k], why=f"tied: {k} = {rel} in every size (the reference needs it)"
            )
        else:
            out.held[k] = f"tied: {k} = {rel} in every size, and those stayed"
    out.dims, out.elements = dims, elements
    if not out.grown:
        out.ok = False
        out.why = "no dimension can grow: " + "; ".join(f"{k}: {w}" for k, w in out.held.items())
    return out
