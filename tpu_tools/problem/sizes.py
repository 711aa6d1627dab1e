"""Target size and check sizes: which shapes a kernel is for, and which shapes validation runs at.

The **target size** is the shape the kernel is for (compile, estimate, tune, profile and score use it):
`full` if the reference's SIZES has it, else the largest by element count. The **check sizes** are
where validation interprets the kernel off the chip: `small`, plus one **derived** size built here from
the reference's own SIZES, so that a kernel written for one shape (hard-coded dims, zeros above some
row count, a grid that floors away a remainder the target has) fails, while a kernel whose blocks
divide both small and the target passes: the derived size keeps every alignment those two share.

How the derived size is built (`derive_size`), one dimension at a time in SIZES order:
- a dimension grows only if it scales between the reference's sizes (its value differs somewhere),
  is an integer, and is not tied to others (see below); the others are held, each with the reason;
- its grain is the alignment small and the target share, gcd(small, target) (no cap: a 512-row
  block that divides small 512 and the target 2048 divides every value tried);
- every value tried also keeps blocks clamped to the dimension (block = min(B, dim) with a power of
  two B that divides the target, "small sizes reuse the file"): it is a multiple of every such B below
  it (`clamp_safe`); a dimension with no value that keeps both is held, saying so;
- first every such dimension takes one step (more grid steps): small + grain where the grain is
  below small (not a multiple of small, so a grid floored by small's block count drops a remainder
  the target would too), else 2 x small (then 3 x small);
- then the dimension that scales most toward the target (ties: the largest target value, then SIZES
  order) grows past `SWITCH_ROWS` (1024), to the first value above it that keeps both, or as far as
  the budget and the target allow: a kernel that does real work up to 1024 rows and writes zeros
  above fails. It grows no further: interpret mode's time grows with the grid. A kernel that switches
  above the derived size still passes off the chip (on a chip, validation also runs at the target size);
- a value the reference refuses (create_inputs or tracing its workload raises) or one that takes the
  inputs and outputs past the budget (`MAX_GROWTH` x small's elements, at least `MIN_BUDGET_ELEMENTS`,
  at most `MAX_ELEMENTS`) falls back to the next value; a dimension with none left is held, saying why;
- tied dimensions stay consistent: where the reference refuses a grown value as it stands, the
  dimensions tied to it in every size are recomputed with it (a product: hidden = heads x head_dim;
  a fixed multiple: out_features = 16 x num_groups) and the tie holds from then on. Ties are only
  hypotheses until the reference refuses without them: two sizes agree by chance too (16p's seq_len
  equals num_heads x head_dim in both).

The **unaligned** size (`DerivedSize.unaligned`) is small with each scaling dimension moved off its
grain (small + min(grain / 2, 128)): where validation probes the kernel's shape contract. What the
kernel does there (raises its own error, leaves a remainder unwritten, or is right) is reported as a
finding, not a failure: the target keeps the alignment by construction.
Pure logic: the caller passes `probe(dims) -> element count` (it raises where the reference refuses).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

DERIVED = "derived"  # the check-size name of the derived intermediate size
UNALIGNED = "unaligned"  # the check-size name of the shape-contract probe (off the shared alignment)
GROWN = "grown"  # the derived size with its lead dimension grown toward the target, as far as MAX_ELEMENTS
# allows: where validation runs when the target's kernel program matches none of the checked ones
SYNTHETIC = (DERIVED, UNALIGNED, GROWN)  # check sizes built here, not written in SIZES


def synthetic(size: str) -> bool:
    """A check size built here: derived, unaligned, grown, `unaligned:<dim>` (one dimension moved off its
    grain) or `grown:<dim>` (one dimension grown toward the target)."""
    return size in SYNTHETIC or size.startswith((f"{UNALIGNED}:", f"{GROWN}:"))


DEFAULT_CHECK_SIZES: tuple[str, ...] = ("small", DERIVED)
PRODUCTION = "full"
LANES = 128  # the TPU lane width: the unaligned probe moves a dimension at most this far off its grain
MAX_GROWTH = 12  # the derived size's inputs + outputs stay within this many times small's
MIN_BUDGET_ELEMENTS = 1 << 20  # ... or this many elements, whichever is larger
MAX_ELEMENTS = 1 << 25  # and never more than this (interpret mode on CPU must stay seconds)
SWITCH_ROWS = 1024  # the lead dimension grows past this row count where the budget allows (a kernel
# that does real work up to 1024 rows and writes zeros above passes small; interpret time grows with
# the grid, so it grows no further)

Probe = Callable[[dict[str, Any]], int]


class DimChange(BaseModel):
    """One dimension of the derived size: its small value, the value used, and why."""

    small: Any
    value: Any
    why: str


class UnalignedSize(BaseModel):
    """The shape-contract probe: small, each scaling dimension moved off the alignment small and the
    target share (validation reports what the kernel does there as its contract)."""

    dims: dict[str, Any] = Field(default_factory=dict, description="the full size dict used")
    off: dict[str, int] = Field(
        default_factory=dict, description="dimensions moved off their grain -> the grain they break"
    )
    held: dict[str, str] = Field(default_factory=dict, description="scaling dimensions kept, and why")
    alone: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="dimension -> the size with only it moved off its grain (size name 'unaligned:<dim>')",
    )
    ok: bool = True
    why: str = ""

    def describe(self) -> str:
        if not self.ok:
            return f"no unaligned size: {self.why}"
        return ", ".join(f"{k}={self.dims[k]} (not a multiple of {g})" for k, g in self.off.items())


class DerivedSize(BaseModel):
    """The derived intermediate check size, dimension by dimension, with the reasons."""

    base: str = Field(description="the SIZES entry it grows from (small)")
    draw: int | None = Field(
        default=None, description="the seed its values were drawn from (validate's seed offset); None: fixed"
    )
    dims: dict[str, Any] = Field(default_factory=dict, description="the full size dict used")
    grown: dict[str, DimChange] = Field(default_factory=dict, description="dimensions above small")
    held: dict[str, str] = Field(default_factory=dict, description="dimensions kept at small, and why")
    elements: int | None = Field(default=None, description="input + output elements at this size")
    budget_elements: int | None = None
    target: str | None = Field(default=None, description="the target size whose alignment it keeps")
    grains: dict[str, int] = Field(
        default_factory=dict, description="scaling dimension -> the alignment small and the target share"
    )
    target_dims: dict[str, Any] = Field(default_factory=dict, description="the target's scaling dimensions")
    unaligned: UnalignedSize | None = Field(default=None, description="the shape-contract probe")
    grown_dims: dict[str, Any] | None = Field(
        default=None,
        description="the derived size with its lead dimension grown toward the target's, within MAX_ELEMENTS "
        "(None: it cannot grow)",
    )
    grown_why: str = ""
    grown_alone: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="dimension -> small with only it grown toward the target's, within MAX_ELEMENTS (size "
        "'grown:<dim>'): where a branch or a part of an operand only the target's longer axis reaches "
        "(K past one step) is run",
    )
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


class ShapeContract(BaseModel):
    """What the kernel did at the unaligned size (off the alignment small and the target share): its
    shape contract, reported as a finding. A failure only under `--strict-shapes`."""

    dims: dict[str, Any] = Field(default_factory=dict, description="the unaligned size it ran at")
    off: dict[str, int] = Field(default_factory=dict, description="dimension -> the alignment it broke")
    outcome: Literal["general", "raises", "drops_remainder", "wrong", "could_not_tell"]
    finding: str = Field(description="one line, built from what happened")
    fix: str = Field(default="", description="what to change, where the kernel drops a remainder silently")
    failure_kind: str | None = Field(default=None, description="how the run there ended (None: right)")
    target_keeps: bool | None = Field(
        default=None, description="the target's dimensions are multiples of every broken alignment"
    )
    dimensions: list[ShapeContract] = Field(
        default_factory=list,
        description="each scaling dimension moved alone (where more than one moves): its own finding",
    )


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


def clamp_safe(v: int, target: int | None) -> bool:
    """A kernel that clamps a power-of-two block to the dimension (block = min(B, dim), B dividing the
    target: "small sizes reuse the file", 9p's SwiGLU) divides `v` too: v is a multiple of every such B
    below it."""
    if target is None or target <= 0:
        return True
    below = 1 << (v.bit_length() - 1)  # the largest power of two <= v
    return v % min(target & -target, below) == 0


def _steps(small: int, grain: int, upper: int, target: int | None) -> list[int]:
    """The one-step values of a dimension, best first: each keeps `grain` and clamped blocks, none
    passes `upper` (where none of small + grain, 2x, 3x does, the first that does)."""
    out = [small + grain] if grain < small else []  # not a multiple of small
    out += [m * small for m in (2, 3) if m * small not in out]
    out = [v for v in out if v <= upper and clamp_safe(v, target)]
    if not out:
        out = [v for v in range(small + grain, upper + 1, grain) if clamp_safe(v, target)][:1]
    return out


def _drawn_steps(small: int, grain: int, upper: int, target: int | None, rng: random.Random) -> list[int]:
    """The one-step values of a dimension in a drawn order: every value up to 2 x small (and `upper`)
    that keeps `grain` and clamped blocks and, where the grain is below small, is not a multiple of small
    (a grain of small itself: 2 x small, as undrawn; the lead dimension's value past 1024 is drawn later)."""
    top = min(upper, 2 * small)
    if grain < small:
        out = [v for v in range(small + grain, top + 1, grain) if v % small and clamp_safe(v, target)]
    else:
        out = [2 * small] if 2 * small <= top and clamp_safe(2 * small, target) else []
    rng.shuffle(out)
    return out


def _why(small: int, v: int, grain_text: str) -> str:
    if v % small:
        return f"{small} -> {v}: not a multiple of small, keeps {grain_text}"
    return f"{small} -> {v} = {v // small} x small: every larger value that keeps {grain_text} is a multiple of small"


def derive_size(
    table: dict[str, dict],
    probe: Probe,
    base: str = "small",
    target: str | None = None,
    draw: int | None = None,
) -> DerivedSize:
    """The derived intermediate size of a reference's SIZES table (see the module docstring).

    `target` names the size whose alignment it keeps with small (None: every size's). `draw` (validate
    passes its seed offset): each value is drawn from this seed among the values that keep the same
    alignment, so no fixed size can be targeted and the same seed gives the same size; None: the first
    value of each ladder, as documented above."""
    rng = random.Random(draw) if draw is not None else None
    out = DerivedSize(base=base, target=target, draw=draw)
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
    aim = table.get(target) if target is not None else None
    state: dict[str, Any] = {"dims": dict(small), "elements": base_elements, "active": set()}

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

    def trial(k: str, value: int, budget: int = budget) -> tuple[dict, int, set[str]] | str:
        """(dims, elements, ties on) with k at value, or why not: as it stands first, then where the
        reference refuses, with the ties a change of k would move."""
        active: set[str] = state["active"]
        extra = ties_of(k) - active
        reasons = []
        for on in (active, active | extra) if extra else (active,):
            dims = tied(state["dims"] | {k: value}, on)
            try:
                n = probe(dims)
            except Exception as e:  # noqa: BLE001 - the reference refuses this shape
                reasons.append(f"{value}: the reference refuses it ({type(e).__name__}: {str(e)[:120]})")
                continue
            if n > budget:
                return f"{value}: {n} elements, over the budget of {budget}"
            return dims, n, set(on)
        return "; ".join(reasons)

    def take(accepted: tuple[dict, int, set[str]]) -> None:
        state["dims"], state["elements"], state["active"] = accepted

    scaling: list[str] = []
    spans: dict[str, tuple[int, int]] = {}  # k -> (small, the largest value any size has)
    for k, v in small.items():
        if not _is_int(v):
            out.held[k] = "not an integer dimension" if k != "dtype" else "the dtype, not a dimension"
            continue
        if any(k not in r for r in rows):
            out.held[k] = "not in every SIZES entry"
            continue
        values = [int(r[k]) for r in rows]
        if len(set(values)) == 1:
            out.held[k] = f"{v} in every SIZES entry: the reference fixes it"
            continue
        if aim is not None and _is_int(aim.get(k)):
            out.grains[k] = math.gcd(int(v), int(aim[k]))
            out.target_dims[k] = aim[k]
        else:
            out.grains[k] = math.gcd(*values)
        spans[k] = (int(v), max(values))
        scaling.append(k)

    def grain_text(k: str) -> str:
        g = out.grains[k]
        if k in out.target_dims:
            return f"the alignment small and the target share (gcd({small[k]}, {out.target_dims[k]}) = {g})"
        return f"the alignment every size shares ({g})"

    # 1. every scaling dimension one step: more grid steps, off small's multiples where the grain allows
    # (drawn: the dimension that scales most first, so the budget never holds it, then the others in a
    # drawn order: which of them the budget leaves room for varies too)
    order = list(scaling)
    if rng is not None and order:
        first = max(order, key=lambda k: (spans[k][1] / spans[k][0], spans[k][1], -scaling.index(k)))
        rest = [k for k in order if k != first]
        rng.shuffle(rest)
        order = [first, *rest]
    for k in order:
        if k in state["active"]:
            continue  # recomputed from the dimensions it is tied to
        v, upper = spans[k]
        ladder = _steps(v, out.grains[k], upper, out.target_dims.get(k))
        if rng is not None:
            ladder = _drawn_steps(v, out.grains[k], upper, out.target_dims.get(k), rng) or ladder
        if not ladder:
            out.held[k] = (
                f"no larger size has it above {v}"
                if upper <= v
                else f"no value in {v + 1}..{upper} keeps both {grain_text(k)} and power-of-two blocks "
                f"clamped to the dimension (a multiple of {int(out.target_dims[k]) & -int(out.target_dims[k])} "
                "divides the target)"
            )
            continue
        reasons: list[str] = []
        for value in ladder:
            got = trial(k, value)
            if isinstance(got, str):
                reasons.append(got)
                if "over the budget" in got and rng is None:  # the ladder grows: the rest are over too
                    break
                continue
            take(got)
            out.grown[k] = DimChange(small=v, value=value, why=_why(v, value, grain_text(k)))
            break
        if k not in out.grown:
            out.held[k] = "held at small (values that keep the grain and clamped blocks): " + "; ".join(
                reasons
            )

    # 2. the dimension that scales most grows as far as the budget allows (largest accepted multiple)
    leads = [k for k in out.grown if k not in state["active"]]
    if leads:
        lead = max(leads, key=lambda k: (spans[k][1] / spans[k][0], spans[k][1], -scaling.index(k)))
        v, upper = spans[lead]
        g, now, aim_k = out.grains[lead], state["dims"][lead], out.target_dims.get(lead)
        v_small = int(small[lead])
        ladder = []  # every value above now that keeps the grain and clamped blocks, to the first past SWITCH_ROWS
        stop = SWITCH_ROWS if rng is None else SWITCH_ROWS + SWITCH_ROWS // 2  # drawn: past it, up to 1.5x
        for value in range(now + g, upper + 1, g):
            if clamp_safe(value, aim_k):
                ladder.append(value)
                if value > stop:
                    break
        lo, best = _largest(ladder, lambda v: None if isinstance(got := trial(lead, v), str) else got)
        value = ladder[lo] if lo >= 0 else now
        if rng is not None and lo >= 0:  # drawn among the values that fit, past SWITCH_ROWS where any does
            # where the grain is below small, off small's multiples (a grid floored by small's blocks drops
            # a remainder here as at the target)
            off = [v for v in ladder[: lo + 1] if g >= v_small or v % v_small]
            past = [v for v in off if v > SWITCH_ROWS] or [v for v in ladder[: lo + 1] if v > SWITCH_ROWS]
            past = past or [ladder[lo]]
            pick = rng.choice(past)
            if pick != value and not isinstance(got := trial(lead, pick), str):
                value, best = pick, got
        if best is not None and value > now:
            take(best)
            out.grown[lead] = DimChange(
                small=v,
                value=value,
                why=(
                    f"{v} -> {value}: the dimension that scales most toward the target "
                    f"({spans[lead][1] // v}x), grown past {SWITCH_ROWS} rows where the budget and the "
                    f"target allow; keeps {grain_text(lead)}"
                ),
            )
    dims, elements, active = state["dims"], state["elements"], state["active"]
    if leads:
        # the dimension that scales most toward the target, grown in step 1 or not (not a tied one)
        free = [k for k in scaling if k not in state["active"]]
        most = max(free, key=lambda k: (spans[k][1] / spans[k][0], spans[k][1], -scaling.index(k)))
        _grow_toward_target(out, state, most, spans[most][1], trial_at=trial)
    for k in scaling:
        if k not in active:
            _grow_alone(out, small, k, spans[k][1], active, tied, probe)
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
    out.unaligned = _unaligned(
        small, [k for k in scaling if k not in active], out.grains, active, tied, probe, budget
    )
    return out


def _grow_toward_target(out: DerivedSize, state: dict, lead: str, upper: int, trial_at) -> None:
    """`out.grown_dims`: the derived size with `lead` at the largest value up to `upper` (the largest size's)
    that keeps its grain and clamped blocks and keeps the inputs and outputs within MAX_ELEMENTS."""
    g, now, aim_k = out.grains[lead], state["dims"][lead], out.target_dims.get(lead)
    ladder = [v for v in range(now + g, upper + 1, g) if clamp_safe(v, aim_k)]

    def fits(value: int) -> tuple[dict, int, set[str]] | None:
        got = trial_at(lead, value, budget=MAX_ELEMENTS)
        return None if isinstance(got, str) else got

    lo, best = _largest(ladder, fits)
    if best is None:
        out.grown_why = f"{lead} cannot grow past {now} within {MAX_ELEMENTS} elements"
        return
    out.grown_dims = dict(best[0])
    out.grown_why = (
        f"{lead} {now} -> {ladder[lo]}: the derived size's lead dimension grown toward the target's "
        f"{upper}, as far as {MAX_ELEMENTS} input and output elements allow ({best[1]})"
    )


def _largest(ladder: list[int], fits: Callable[[int], Any]) -> tuple[int, Any]:
    """(index, what `fits` gave) for the largest ladder value it accepts, by bisection: elements grow with
    the dimension, and a refusal counts as too far. (-1, None) where it accepts none."""
    lo, hi, best = -1, len(ladder) - 1, None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        got = fits(ladder[mid])
        if got is None:
            hi = mid - 1
        else:
            lo, best = mid, got
    return lo, best


def _grow_alone(
    out: DerivedSize,
    small: dict,
    k: str,
    upper: int,
    active: set[str],
    tied: Callable[[dict, set[str]], dict],
    probe: Probe,
) -> None:
    """`out.grown_alone[k]`: small with k alone at the largest value up to `upper` (the largest size's) that
    keeps its grain and clamped blocks, that the reference takes and whose inputs and outputs stay within
    MAX_ELEMENTS (a matmul's K at the target's 8192 with M and N at small: every K step the target has)."""
    g, now, aim_k = out.grains[k], int(small[k]), out.target_dims.get(k)
    ladder = [v for v in range(now + g, upper + 1, g) if clamp_safe(v, aim_k)]

    def fits(value: int) -> dict | None:
        dims = tied(dict(small) | {k: value}, active)
        try:
            return dims if probe(dims) <= MAX_ELEMENTS else None
        except Exception:  # noqa: BLE001 - the reference refuses this shape
            return None

    _, best = _largest(ladder, fits)
    if best is not None and best != out.grown_dims:
        out.grown_alone[k] = best


def _unaligned(
    small: dict,
    scaling: list[str],
    grains: dict[str, int],
    active: set[str],
    tied: Callable[[dict, set[str]], dict],
    probe: Probe,
    budget: int,
) -> UnalignedSize:
    """Small, each scaling dimension with a grain moved off it by min(grain / 2, LANES), where the
    reference takes it (ties kept as the derived size found them)."""
    out = UnalignedSize(dims=dict(small))
    for k in scaling:
        g = grains[k]
        if g < 2:
            out.held[k] = f"its grain is {g}: every value keeps it"
            continue
        value = small[k] + min(g // 2, LANES)
        dims = tied(out.dims | {k: value}, active)
        try:
            n = probe(dims)
        except Exception as e:  # noqa: BLE001 - the reference refuses this shape
            out.held[k] = f"{value}: the reference refuses it ({type(e).__name__}: {str(e)[:120]})"
            continue
        if n > budget:
            out.held[k] = f"{value}: {n} elements, over the budget of {budget}"
            continue
        out.dims, out.off[k] = dims, g
        one = tied(dict(small) | {k: value}, active)
        try:
            probe(one)
        except Exception:  # noqa: BLE001 - the reference takes it only with the others moved
            continue
        out.alone[k] = one
    if not out.off:
        out.ok = False
        out.why = "no dimension can leave its alignment: " + (
            "; ".join(f"{k}: {w}" for k, w in out.held.items()) or "nothing scales"
        )
    return out
