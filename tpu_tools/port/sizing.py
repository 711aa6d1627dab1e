"""Which sizes a port is checked at: the source's own when it fits the host, else the largest that does.

KernelBench names its sizes as module globals (`batch_size = 4096`, `dim = 393216`) that `get_inputs()`
and `get_init_inputs()` read when called. `size_globals` finds them (top-level integer assignments those
functions read, directly or through another global), `load_module` executes the source with some of
them changed, and `plan_sizes` halves the largest one at a time, keeping each value's alignment (the
largest power of two dividing it, up to 128 lanes; a power of two itself halves on down to 2), measuring every candidate on the meta device
(`footprint`), until the check fits `MEMORY_SHARE` of the available memory and `TIME_BUDGET_S`. A value
the source refuses (the meta build or forward raises, an output comes out empty) is held. Small
integers (< `MIN_SCALABLE`) and structural names (kernel_size, stride, groups, heads, ...) are never
scaled. `full` stays the source's own shape; `small` goes further down, to where interpret-mode
validation is quick.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.port.footprint import BASE_BYTES, Footprint, MetaFailure, measure
from maxkernel.tpu_tools.port.source_module import load_module
from maxkernel.tpu_tools.problem.memory import MEMORY_SHARE, TooBig, available_bytes, gib

TIME_BUDGET_S = 30.0  # the port check's estimated run time at the check size (all seeds, both sides)
MIN_SCALABLE = 16  # integers below this (a kernel size, an axis, a head count) are never scaled
SMALL_ELEMENTS = 1 << 18  # `small`: the largest input or output at most this many elements
LANE = 128
STRUCTURAL = re.compile(
    r"kernel|stride|pad|dilation|group|head|eps|axis|pool|window|order|margin|seed|bins|classes",
    re.IGNORECASE,
)


class SizePlan(BaseModel):
    """The sizes a port is made and checked at (each a dict of the source's size globals)."""

    names: list[str] = Field(default_factory=list, description="the size globals scaled")
    full: dict[str, int] = Field(default_factory=dict)
    check: dict[str, int] = Field(default_factory=dict, description="where the seeds run")
    small: dict[str, int] = Field(default_factory=dict)
    check_name: str = "full"  # 'full' when the source's own size fits, else 'check'
    footprints: dict[str, Footprint] = Field(default_factory=dict)
    budget_bytes: int = 0
    budget_seconds: float = TIME_BUDGET_S
    held: dict[str, str] = Field(default_factory=dict, description="globals not scaled further, and why")
    note: str = ""

    def describe(self) -> str:
        fp = self.footprints.get(self.check_name)
        dims = ", ".join(f"{k}={v}" for k, v in self.check.items()) or "the source's own shape"
        est = f"~{gib(fp.check_bytes())}, ~{fp.check_seconds(4):.0f} s (estimate)" if fp else "no estimate"
        return f"checked at {self.check_name!r} ({dims}; {est})"


def _int_value(node: ast.AST) -> int | None:
    """An integer constant expression (4096, 16384 * 2, 2 ** 20), else None."""
    try:
        v = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})  # noqa: S307
    except Exception:  # noqa: BLE001 - a name or call: not a constant
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def size_globals(text: str) -> dict[str, int]:
    """Module-level integer constants that get_inputs()/get_init_inputs() read (directly or through
    another global), in file order."""
    tree = ast.parse(text)
    assigned: dict[str, ast.AST] = {}
    read: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        elif isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            read |= _loads(node)
    todo = list(read)
    while todo:
        name = todo.pop()
        for dep in _loads(assigned[name]) if name in assigned else ():
            if dep not in read:
                read.add(dep)
                todo.append(dep)
    out: dict[str, int] = {}
    for name, value in assigned.items():
        v = _int_value(value)
        if name in read and v is not None:
            out[name] = v
    return out


def scalable(globals_: dict[str, int]) -> list[str]:
    return [n for n, v in globals_.items() if v >= MIN_SCALABLE and not STRUCTURAL.search(n)]


def _build(module: ModuleType):
    from maxkernel.tpu_tools.port.source import INPUT_FUNCTIONS, model_class

    def build():
        cls, _ = model_class(module, Path(module.__file__))
        init = getattr(module, "get_init_inputs", None)
        args = list(init()) if callable(init) else []
        fn = next(getattr(module, n) for n in INPUT_FUNCTIONS if callable(getattr(module, n, None)))
        raw = fn()
        return cls(*args).eval(), list(raw) if isinstance(raw, list | tuple) else [raw]

    return build


def footprint_at(path: Path, text: str, dims: dict[str, int]) -> Footprint:
    return measure(_build(load_module(path, text, dims)))


def _halve(v: int) -> int:
    """Half of v, rounded down to v's alignment (a power of two up to 128); a power of two at or below
    128 halves on down to 2."""
    align = min(v & -v, LANE)
    if v // 2 >= align:
        return (v // 2) // align * align
    return v // 2 if v == align and v // 2 >= 2 else v


def plan_sizes(
    path: Path,
    text: str,
    *,
    runs: int,
    share: float = MEMORY_SHARE,
    seconds: float = TIME_BUDGET_S,
    budget_bytes: int | None = None,
) -> SizePlan:
    """The check size (the source's own where it fits) and `small`. TooBig when no size fits."""
    avail = available_bytes()
    budget = int(avail * share) if budget_bytes is None else budget_bytes
    found = size_globals(text)
    names = scalable(found)
    full = {n: found[n] for n in names}
    plan = SizePlan(names=names, full=full, check=dict(full), small=dict(full), budget_bytes=budget,
                    budget_seconds=seconds)  # fmt: skip
    if budget <= BASE_BYTES:
        raise TooBig(
            f"{path}: no check size fits the host: torch, jax and their programs alone take about "
            f"{gib(BASE_BYTES)}; the budget is {gib(budget)} ({share:.0%} of {gib(avail)} available): not run"
        )
    try:
        fp = footprint_at(path, text, full)
    except MetaFailure as e:
        plan.note = f"no memory estimate ({e}): checked at the source's own shape"
        return plan
    plan.footprints["full"] = fp

    def fits(f: Footprint) -> bool:  # a loss is checked op by op (its scalar alone a constant can pass)
        need = f.locate_bytes() if f.scalar_outputs else f.check_bytes()
        return need <= budget and f.check_seconds(runs) <= seconds

    check_found = fits(fp)
    dims, cur = dict(full), fp
    frozen: set[str] = set()
    steps = 0
    while steps < 64:
        small_enough = check_found and cur.largest <= SMALL_ELEMENTS and dims != full
        if small_enough:
            break
        live = [n for n in names if n not in frozen and _halve(dims[n]) < dims[n]]
        if not live:
            break
        name = max(live, key=lambda n: dims[n])
        # globals equal at full move together; no two cross (seq_len stays within max_seqlen)
        group = [n for n in names if full[n] == full[name] and dims[n] == dims[name]]
        far = not check_found and (cur.check_bytes() > 4 * budget or cur.check_seconds(runs) > 4 * seconds)
        if far and not frozen and len(live) > 1:  # far above the budget: every global halves at once
            group = live
        trial = dict(dims, **{n: _halve(dims[n]) for n in group})
        if any(full[a] < full[b] and trial[a] > trial[b] for a in names for b in names):
            frozen.update([name] if len(group) > 1 and group == live else group)
            continue
        steps += 1
        try:
            f = footprint_at(path, text, trial)
            if f.outputs == 0 or f.largest == 0:
                raise MetaFailure("an empty output")
        except MetaFailure as e:
            frozen.add(name)
            plan.held[name] = f"{name}={trial[name]} refused by the source ({e})"
            continue
        dims, cur = trial, f
        for n in list(frozen):  # a value refused beside the old one may pass beside the new
            plan.held.pop(n, None)
        frozen.clear()
        if not check_found and fits(f):
            check_found = True
            plan.check, plan.check_name = dict(dims), "check"
            plan.footprints["check"] = f
    for n in names:
        if n not in frozen and _halve(dims[n]) >= dims[n]:
            plan.held.setdefault(n, f"{n}={dims[n]} is at its alignment")
    if not check_found:
        what = ", ".join(f"{k}={v}" for k, v in dims.items()) or "its own shape (no size global to scale)"
        raise TooBig(
            f"{path}: no check size fits the host: at {what} the check needs about {gib(cur.check_bytes())} "
            f"and {cur.check_seconds(runs):.0f} s (estimate); the budget is {gib(budget)} ({share:.0%} of "
            f"{gib(avail)} available) and {seconds:.0f} s; the source's own shape needs "
            f"{gib(fp.check_bytes())}: not run"
        )
    if dims != full:
        plan.small = dict(dims)
        plan.footprints["small"] = cur
    else:
        plan.small = dict(plan.check)
    return plan
