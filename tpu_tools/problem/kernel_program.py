"""The kernel program a traced candidate runs, described so that two sizes can be compared.

A kernel validated at the check sizes is trusted at the target size only if the target runs the same
program. Block and grid sizes may differ; what must not is what the body does: a Python branch on a static
shape (`if rows > 1024: write zeros`) traces a different body, a `pl.when` on a static size traces a cond
whose predicate is a constant (or a function of the grid position alone) that takes another branch, and a
block or grid choice can leave part of an output unwritten. So for each `pallas_call`, in program order:

- `ops`: the distinct primitives of the body that run, each with the path of conds and loops it sits in
  (`cond#0[1]/swap`: cond number 0 of the body, branch 1). A cond whose predicate folds to a value from
  literals and `program_id`s (evaluated over the grid points) contributes only the branches it takes;
  any other cond contributes all of them. Layout-only primitives (reshape, broadcast, slice, ...) are
  left out: jnp skips them when a shape already fits, which depends on the size. A set, not a multiset: a
  Python loop over a block-dependent count repeats the same ops.
- `branches`: which branch each foldable cond takes, in words.
- `dimension_semantics`, and the share of each output's blocks that some grid step writes (`coverage`).

Reads jax 0.10.2's jaxpr (private cond/loop params) through pallas_info's helpers; pure, no device.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from maxkernel.tpu_tools.problem.pallas_info import (
    _NP_BINARY,
    _np_div,
    _np_rem,
    find_pallas_calls,
    index_maps,
)

# Primitives whose presence depends on shapes, not on what is computed (jnp drops a reshape or a slice that
# changes nothing), and containers that only wrap other primitives.
LAYOUT_ONLY = {
    "reshape",
    "squeeze",
    "expand_dims",
    "broadcast_in_dim",
    "slice",
    "copy",
    "copy_p",
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "remat",
    "checkpoint",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
}
TRANSPARENT = {
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "remat",
    "checkpoint",
    "custom_jvp_call",
    "custom_vjp_call",
}
MAX_POINTS = 1 << 18  # grid points a predicate or an index map is evaluated at (more: sampled per axis)


class CallProgram(BaseModel):
    """One pallas_call's program: what its body runs, where branches go, how its grid runs."""

    kernel: str
    ops: list[str] = Field(
        default_factory=list, description="distinct body primitives that run, with their path"
    )
    branches: list[str] = Field(default_factory=list, description="the branch each foldable cond takes")
    grid_conds: list[int] = Field(
        default_factory=list, description="the conds whose branches depend on the grid position"
    )
    dimension_semantics: list[str] | None = None
    grid: list[int | None] = Field(default_factory=list)
    coverage: list[float | None] = Field(
        default_factory=list, description="per output: the share of its blocks some grid step writes"
    )


class KernelProgram(BaseModel):
    """Every pallas_call of a traced candidate, in program order."""

    calls: list[CallProgram] = Field(default_factory=list)


def _points(grid: tuple[int, ...]) -> np.ndarray:
    """Grid points (N, rank): all of them, or per axis its ends and evenly spaced values when too many."""
    if not grid:
        return np.zeros((1, 0), np.int64)
    if math.prod(grid) <= MAX_POINTS:
        axes = [np.arange(n) for n in grid]
    else:
        per = max(2, int(MAX_POINTS ** (1 / len(grid))))
        axes = [np.unique(np.linspace(0, n - 1, min(n, per)).astype(np.int64)) for n in grid]
    return np.array(list(itertools.product(*axes)), np.int64).reshape(-1, len(grid))


def _fold(eqn, env: dict, read) -> None:
    """The value of a scalar equation whose inputs are known (literals, program ids, folded values)."""
    name = eqn.primitive.name
    if len(eqn.outvars) != 1 or getattr(eqn.outvars[0].aval, "shape", None) != ():
        return
    xs = [read(v) for v in eqn.invars]
    if any(x is None for x in xs):
        return
    try:
        if name in _NP_BINARY and len(xs) == 2:
            out = _NP_BINARY[name](*xs)
        elif name == "div":
            out = _np_div(*xs)
        elif name == "rem":
            out = _np_rem(*xs)
        elif name == "neg":
            out = -xs[0]
        elif name == "not":
            out = np.logical_not(xs[0]) if xs[0].dtype == bool else ~xs[0]
        elif name == "convert_element_type":
            out = xs[0].astype(np.dtype(eqn.params["new_dtype"]))
        elif name == "select_n":
            out = np.choose(xs[0].astype(np.int64), xs[1:])
        elif name == "clamp":
            out = np.clip(xs[1], xs[0], xs[2])
        else:
            return
    except Exception:  # noqa: BLE001 - a value we cannot fold stays unknown
        return
    env[eqn.outvars[0]] = np.asarray(out)


class _Walk:
    def __init__(self, points: np.ndarray | None, grid: tuple[int, ...]) -> None:
        self.points, self.grid = points, grid
        self.ops: set[str] = set()
        self.branches: list[str] = []
        self.grid_conds: list[int] = []
        self.conds = 0

    def body(self, jaxpr, prefix: str, env: dict) -> None:
        from jax._src import core as jcore

        def read(v):
            if isinstance(v, jcore.Literal):
                return np.asarray(v.val)
            return env.get(v)

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "program_id":
                if self.points is not None:
                    env[eqn.outvars[0]] = self.points[:, int(eqn.params["axis"])]
                continue
            if name == "num_programs":
                g = self.grid[int(eqn.params["axis"])] if int(eqn.params["axis"]) < len(self.grid) else None
                if g is not None:
                    env[eqn.outvars[0]] = np.asarray(g)
                continue
            if name == "cond":
                self.cond(eqn, prefix, read)
                continue
            subs = list(jcore.jaxprs_in_params(eqn.params))
            if subs:
                label = "" if name in TRANSPARENT else f"{name}/"
                for sub in subs:
                    inner = {}
                    if name in TRANSPARENT and len(sub.invars) == len(eqn.invars):
                        inner = {a: read(b) for a, b in zip(sub.invars, eqn.invars, strict=True)}
                        inner = {k: v for k, v in inner.items() if v is not None}
                    self.body(sub, prefix + label, inner)
                continue
            _fold(eqn, env, read)
            if name not in LAYOUT_ONLY:
                self.ops.add(prefix + name)

    def cond(self, eqn, prefix: str, read) -> None:
        number = self.conds
        self.conds += 1
        branches = eqn.params["branches"]
        index = read(eqn.invars[0])
        taken = list(range(len(branches)))
        if index is not None:
            values = np.clip(np.asarray(index).astype(np.int64), 0, len(branches) - 1)
            taken = sorted({int(x) for x in np.unique(values)})
            how = "a constant predicate" if np.asarray(index).ndim == 0 else "over the grid"
            if how == "over the grid":
                self.grid_conds.append(number)
            self.branches.append(f"cond #{number} takes branch {', '.join(map(str, taken))} ({how})")
        operands = eqn.invars[1:]
        for k in taken:
            sub = branches[k].jaxpr
            inner = {a: read(b) for a, b in zip(sub.invars, operands, strict=False)}
            self.body(sub, f"{prefix}cond#{number}[{k}]/", {a: v for a, v in inner.items() if v is not None})


def _coverage(info, points: np.ndarray | None) -> list[float | None]:
    """Per output: the share of its blocks that some grid step's index map names (None: not told)."""
    aliased = {o for _, o in info.input_output_aliases}
    maps = index_maps(info)[len(info.inputs) :]
    out: list[float | None] = []
    for b, imap in zip(info.outputs, maps, strict=False):
        if (
            points is None
            or b.position in aliased
            or not b.pipelined
            or b.uses_scalar_prefetch
            or imap is None
            or any(k not in ("blocked", "squeezed") for k in b.block_dims)
        ):
            out.append(None)
            continue
        try:
            idx = imap.evaluate(points)
        except Exception:  # noqa: BLE001 - a map we cannot evaluate tells nothing
            out.append(None)
            continue
        counts = [-(-a // (s or 1)) for a, s in zip(b.array_shape, b.block_shape, strict=False)]
        inside = np.all((idx >= 0) & (idx < np.asarray(counts)), axis=1)
        seen = len(np.unique(idx[inside], axis=0)) if inside.any() else 0
        out.append(round(seen / max(1, math.prod(counts)), 6))
    return out


def kernel_program(closed_jaxpr: Any) -> KernelProgram:
    """The program of every pallas_call in a traced candidate (see the module docstring)."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    infos = find_pallas_calls(jaxpr)
    calls = []
    for info, eqn in zip(infos, _pallas_eqns(jaxpr), strict=False):
        known = all(g is not None for g in info.grid)
        grid = tuple(int(g) for g in info.grid) if known else ()
        points = _points(grid) if known else None  # a run-time grid: program ids stay unknown
        walk = _Walk(points, grid)
        body = eqn.params["jaxpr"]
        walk.body(getattr(body, "jaxpr", body), "", {})
        exact = known and math.prod(grid) <= MAX_POINTS
        calls.append(
            CallProgram(
                kernel=info.kernel_name,
                ops=sorted(walk.ops),
                branches=walk.branches,
                grid_conds=walk.grid_conds,
                dimension_semantics=list(info.dimension_semantics) if info.dimension_semantics else None,
                grid=list(info.grid),
                coverage=_coverage(info, points if exact else None),
            )
        )
    return KernelProgram(calls=calls)


def _pallas_eqns(jaxpr):
    from jax._src import core as jcore

    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
            continue
        for sub in jcore.jaxprs_in_params(eqn.params):
            yield from _pallas_eqns(sub)


def differences(
    target: KernelProgram, checked: KernelProgram, at: str, where: str, *, over_grid: bool = True
) -> list[str]:
    """What the program at the target (`at`) does that the one validated at `where` does not: empty when
    they are the same program (block and grid sizes aside). `over_grid=False` leaves out the ops under a
    cond that depends on the grid position (a branch the target's longer grid reaches: a reduction axis
    of one step at the check sizes reaches its `k > 0` branch only there)."""
    out: list[str] = []
    if len(target.calls) != len(checked.calls):
        return [f"{len(target.calls)} pallas_call(s) at {at}, {len(checked.calls)} at {where}"]
    for i, (t, c) in enumerate(zip(target.calls, checked.calls, strict=True)):
        call = f"pallas_call {i} ({t.kernel})" if len(target.calls) > 1 or t.kernel != c.kernel else t.kernel
        if t.kernel != c.kernel:
            out.append(f"pallas_call {i} runs {t.kernel} at {at}, {c.kernel} at {where}")
            continue
        grid = {f"cond#{n}[" for n in (*t.grid_conds, *c.grid_conds)} if not over_grid else set()
        only_t = sorted(o for o in set(t.ops) - set(c.ops) if not any(g in o for g in grid))
        only_c = sorted(o for o in set(c.ops) - set(t.ops) if not any(g in o for g in grid))
        if only_t or only_c:
            parts = []
            if only_t:
                parts.append(f"runs {_few(only_t)} only at {at}")
            if only_c:
                parts.append(f"runs {_few(only_c)} only at {where}")
            why = [b for b in t.branches if b not in c.branches]
            because = f" ({'; '.join(why)} at {at})" if why else ""
            out.append(f"{call}'s body {' and '.join(parts)}{because}")
        if t.dimension_semantics != c.dimension_semantics:
            out.append(
                f"{call}'s grid semantics are {_sem(t.dimension_semantics)} at {at}, "
                f"{_sem(c.dimension_semantics)} at {where}"
            )
        for j, (a, b) in enumerate(zip(t.coverage, c.coverage, strict=False)):
            if a is not None and b is not None and a < 1 and b >= 1:
                out.append(
                    f"{call}'s grid writes {a * 100:.3g}% of output {j}'s blocks at {at} (grid "
                    f"{tuple(t.grid)}), all of them at {where}"
                )
    return out


def _few(ops: list[str], n: int = 6) -> str:
    return ", ".join(ops[:n]) + (f" and {len(ops) - n} more" if len(ops) > n else "")


def _sem(s: list[str] | None) -> str:
    return "unset" if s is None else f"({', '.join(s)})"
