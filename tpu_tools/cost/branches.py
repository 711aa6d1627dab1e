"""How often each `pl.when` branch of a kernel body runs over its grid.

A predicated branch (an init under `pl.when(k == 0)`, a causal kernel's skip above the diagonal, a
two-pass kernel's phases) runs on some grid steps only. Charged on every step, a causal flash kernel
costs twice its work and a two-pass one four times. A predicate that is a function of the program ids,
the grid's sizes and literals is evaluated with NumPy on every point of the axes it reads; one that reads memory (a
scalar-prefetch table, a ref) is unknown, and its branches stay charged on every step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.data_work import BodyCounts
from maxkernel.tpu_tools.cost.jaxpr_ops import TRANSCENDENTAL, _conv_flops, _dot_flops, _size, _subjaxprs
from maxkernel.tpu_tools.problem.dot_precision import dot_passes

__all__ = ["BranchWork", "KernelBranches", "body_loop_trips", "body_work", "kernel_branches"]

# Grid points past this (over the axes a body reads) are not enumerated: their branches stay charged every step.
MAX_STEPS = 1 << 22


class BranchWork(BaseModel):
    """The work of one part of a kernel body, and the share of grid steps that run it."""

    fraction: float | None = Field(description="share of grid steps that run it; None: unknown (every step)")
    flops: float = 0.0
    elements: float = Field(
        0.0, description="elements produced by its array ops (loads, stores, elementwise)"
    )
    transcendentals: float = 0.0
    mxu_pass_flops: dict[str, float] = Field(
        default_factory=dict,
        description="matmul flops x the MXU passes a Mosaic kernel takes for them, by the rate's dtype",
    )
    equations: int = Field(0, description="equations in the branch itself (0: an empty branch)")

    def time(self, mxu_flops_per_s: float, vpu_ops_per_s: float, transcendental_ops: float) -> float:
        return (
            self.flops / mxu_flops_per_s
            + (self.elements + transcendental_ops * self.transcendentals) / vpu_ops_per_s
        )


class KernelBranches(BaseModel):
    """A kernel body split into the part every step runs and its top-level conditionals' branches."""

    always: BranchWork
    conds: list[list[BranchWork]] = Field(
        default_factory=list, description="per top-level cond, its branches"
    )
    unknown: int = Field(0, description="conds whose predicate could not be evaluated over the grid")
    steps: int = 0

    @property
    def known(self) -> bool:
        """Some top-level cond's predicate was evaluated over the grid."""
        return bool(self.conds) and self.unknown < len(self.conds)

    def when_fractions(self) -> list[float | None] | None:
        """Per top-level cond in program order, the share of grid steps that run its body (None: unknown),
        when every cond is a pl.when (one branch with equations, the others empty); else None. These pair
        with the compiled loop's pl.when regions (llo_parse.WhenRegion), one region per body."""
        out: list[float | None] = []
        for branches in self.conds:
            bodies = [b for b in branches if b.equations]
            if len(bodies) != 1:
                return None
            out.append(bodies[0].fraction)
        return out

    def expected_flops(self) -> float:
        """Matmul flops of an average step: each branch weighted by its share (unknown: the costliest)."""
        out = self.always.flops
        for branches in self.conds:
            if any(b.fraction is None for b in branches):
                out += max((b.flops for b in branches), default=0.0)
            else:
                out += sum(b.fraction * b.flops for b in branches)
        return out

    def active_fraction(
        self, mxu_flops_per_s: float, vpu_ops_per_s: float, transcendental_ops: float, *, all_branches: bool
    ) -> float | None:
        """Expected work per step over the work a tier charges per step, or None when nothing is known.

        `all_branches`: the compiled loop holds every branch's bundles (tier llo); else the costliest
        branch of each cond is charged (tier model)."""
        if not self.known:
            return None

        def t(w: BranchWork) -> float:
            return w.time(mxu_flops_per_s, vpu_ops_per_s, transcendental_ops)

        charged = expected = t(self.always)
        for branches in self.conds:
            times = [t(b) for b in branches]
            charge = sum(times) if all_branches else max(times, default=0.0)
            charged += charge
            if any(b.fraction is None for b in branches):
                expected += charge
            else:
                expected += sum(b.fraction * x for b, x in zip(branches, times, strict=True))
        return expected / charged if charged > 0 else None


def body_work(eqns: Any, counts: BodyCounts | None = None) -> BranchWork:
    """Flops, array elements and transcendentals of a (sub)body's equations; a nested cond counts its
    costliest branch (by flops + transcendentals, the first on a tie), a scan its length, a while loop
    one iteration. With `counts` (the body run on the inputs' values, data_work.py), a cond counts each
    branch by the share of its executions that took it and a while loop its mean trips per entry."""
    w = BranchWork(fraction=1.0)
    for eqn in eqns:
        name = eqn.primitive.name
        subs = _subjaxprs(eqn)
        if name in ("dot_general", "conv_general_dilated"):
            f = _dot_flops(eqn) if name == "dot_general" else _conv_flops(eqn)
            w.flops += f
            rate, passes = dot_passes(eqn, mosaic=True)
            w.mxu_pass_flops[rate] = w.mxu_pass_flops.get(rate, 0.0) + f * passes
        elif name in TRANSCENDENTAL:
            w.transcendentals += _size(eqn.outvars[0].aval)
        if not subs:
            w.elements += sum(_size(v.aval) for v in eqn.outvars if getattr(v.aval, "shape", ()))
            continue
        shares = counts.branch_shares(eqn) if counts is not None and name == "cond" else None
        if shares is not None:
            parts = [body_work(s.eqns, counts) for s in subs]
            mults = shares
        elif name == "cond":
            parts = [
                max((body_work(s.eqns, counts) for s in subs), key=lambda p: p.flops + p.transcendentals)
            ]
            mults = [1.0]
        else:
            parts = [body_work(s.eqns, counts) for s in subs]
            trips = counts.mean_trips(eqn) if counts is not None and name in ("while", "scan") else None
            if trips is not None:  # a while loop's cond and body, or a scan's body: per iteration
                mults = [trips] * len(parts)
            else:
                mults = [float(eqn.params.get("length", 1)) if name == "scan" else 1.0] * len(parts)
        for part, mult in zip(parts, mults, strict=True):
            w.flops += mult * part.flops
            w.elements += mult * part.elements
            w.transcendentals += mult * part.transcendentals
            for rate, f in part.mxu_pass_flops.items():
                w.mxu_pass_flops[rate] = w.mxu_pass_flops.get(rate, 0.0) + mult * f
    return w


def body_loop_trips(eqns: Any, counts: BodyCounts | None = None) -> list[float | None]:
    """The trip count of each loop in a kernel body, in program order (an outer loop before the loops in
    it), as the compiled loop runs it: a scan's length over its unroll; a while loop's is None (its bound
    is a value) unless `counts` hold its mean trips per entry on the inputs' values."""
    out: list[float | None] = []
    for eqn in eqns:
        name = eqn.primitive.name
        if name == "scan":
            length = int(eqn.params.get("length", 1))
            unroll = eqn.params.get("unroll", 1)
            unroll = length if unroll is True else max(1, int(unroll or 1))
            if length > unroll:  # fully unrolled: no loop left in the compiled code
                out.append(-(-length // unroll))
        elif name == "while":
            out.append(counts.mean_trips(eqn) if counts is not None else None)
        for sub in _subjaxprs(eqn):
            out += body_loop_trips(sub.eqns, counts)
    return out


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    return a / b


_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _trunc_div, "rem": np.fmod,
    "max": np.maximum, "min": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.bitwise_and,
    "or": np.bitwise_or, "xor": np.bitwise_xor,
}  # fmt: skip
_UNARY = {"neg": np.negative, "abs": np.abs, "sign": np.sign, "not": np.invert}


def _run(jaxpr: Any, consts: list, args: list, idx: np.ndarray, grid: tuple[int, ...], seen: list) -> list:
    """Evaluate the scalar part of a body over every grid point; unknown values are None. Each top-level
    cond's branch index (an array over the steps, or None) is appended to `seen` in program order."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        if hasattr(v, "val"):  # a Literal
            return np.asarray(v.val)
        return env.get(v)

    for v, x in zip(jaxpr.constvars, consts, strict=False):
        env[v] = None if getattr(np.asarray(x), "size", 2) != 1 else np.asarray(x)
    for v, x in zip(jaxpr.invars, args, strict=False):
        env[v] = x
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        if name == "cond":
            seen.append(ins[0])
            continue
        if any(x is None for x in ins):
            continue
        out: Any = None
        try:
            if name == "program_id":
                out = idx[int(eqn.params["axis"])]
            elif name == "num_programs":
                out = np.asarray(grid[int(eqn.params["axis"])])
            elif name in _BINARY and len(ins) == 2:
                out = _BINARY[name](ins[0], ins[1])
            elif name in _UNARY and len(ins) == 1:
                out = _UNARY[name](ins[0])
            elif name == "convert_element_type":
                out = ins[0].astype(np.dtype(eqn.params["new_dtype"]))
            elif name == "select_n":
                out = np.choose(ins[0].astype(np.int64), ins[1:])
            elif name in ("jit", "pjit", "closed_call") and "jaxpr" in eqn.params:
                inner = eqn.params["jaxpr"]
                outs = _run(inner.jaxpr, list(inner.consts), ins, idx, grid, [])
                for v, x in zip(eqn.outvars, outs, strict=False):
                    env[v] = x
                continue
        except (TypeError, ValueError, KeyError, ZeroDivisionError, FloatingPointError):
            out = None
        if out is not None and len(eqn.outvars) == 1 and np.ndim(out) in (0, 1):
            env[eqn.outvars[0]] = np.asarray(out)
    return [read(v) for v in jaxpr.outvars]


def _program_axes(jaxpr: Any) -> set[int]:
    """The grid axes a body reads (`program_id`), in it and every sub-jaxpr."""
    axes: set[int] = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "program_id":
            axes.add(int(eqn.params["axis"]))
        for sub in _subjaxprs(eqn):
            axes |= _program_axes(sub)
    return axes


def kernel_branches(
    pallas_eqn: Any, *, every_step: bool = False, counts: BodyCounts | None = None
) -> KernelBranches | None:
    """The branches of a pallas_call's body and how often each runs, or None (no top-level cond).

    The predicates are evaluated over the axes the body reads (program_id) only, the others held at 0:
    a predicate cannot depend on an axis the body never reads, so each point of that sub-grid stands for
    the same number of steps and every share is the same fraction, exactly. Causal flash attention at
    [8, 32, 16384] (4M steps) is 16K points, not 4M (1.6 s and 0.5 GB of index arrays).
    `every_step`: evaluate on every grid point instead (the definition; tests compare the two).
    `counts`: the body run over the grid on the inputs' values (data_work.simulate_body): each cond's
    shares are the ones it took there, a predicate reading a prefetch table included."""
    body = pallas_eqn.params["jaxpr"]
    conds = [e for e in body.eqns if e.primitive.name == "cond"]
    if not conds:
        return None
    always = body_work([e for e in body.eqns if not any(e is c for c in conds)], counts)
    if counts is not None:
        out = KernelBranches(always=always, steps=counts.steps)
        for eqn in conds:
            subs = _subjaxprs(eqn)
            taken = counts.cond_taken.get(id(eqn))
            known = taken is not None and not counts.cond_unknown.get(id(eqn)) and counts.steps
            if not known:
                out.unknown += 1
            out.conds.append(
                [
                    body_work(s.eqns, counts).model_copy(
                        update={
                            "fraction": taken[b] / counts.steps if known else None,  # type: ignore[index]
                            "equations": len(s.eqns),
                        }
                    )
                    for b, s in enumerate(subs)
                ]
            )
        return out
    grid = tuple(getattr(pallas_eqn.params.get("grid_mapping"), "grid", ()) or ())
    indices: list = []
    steps = math.prod(grid) if grid and all(isinstance(g, int) for g in grid) else 0
    read = set(range(len(grid))) if every_step else _program_axes(body)
    walked = tuple(g if d in read else 1 for d, g in enumerate(grid))
    points = math.prod(walked) if steps else 0
    if 0 < points <= MAX_STEPS:
        idx = np.indices(walked).reshape(len(grid), -1)
        with np.errstate(all="ignore"):
            _run(body, [], [None] * len(body.invars), idx, grid, indices)
    else:
        indices = [None] * len(conds)
    out = KernelBranches(always=always, steps=steps)
    for eqn, index in zip(conds, indices + [None] * (len(conds) - len(indices)), strict=False):
        subs = _subjaxprs(eqn)
        if index is None:
            out.unknown += 1
            out.conds.append(
                [
                    body_work(s.eqns).model_copy(update={"fraction": None, "equations": len(s.eqns)})
                    for s in subs
                ]
            )
            continue
        which = np.clip(np.broadcast_to(np.asarray(index).astype(np.int64), (points,)), 0, len(subs) - 1)
        out.conds.append(
            [
                body_work(s.eqns).model_copy(
                    update={"fraction": float(np.mean(which == b)), "equations": len(s.eqns)}
                )
                for b, s in enumerate(subs)
            ]
        )
    return out
