"""Data-dependent work from the inputs' values: run-time grid axes, scalar-prefetch tables, and how often
each `pl.when` branch and `while` loop of a kernel body really runs.

A grouped matmul's m-tile count, a ragged paged attention's loops over sequences and KV blocks, a
`pl.when` on a prefetched count: their traced shapes give only a ceiling. The reference's own inputs at
the target size hold the answer, and the operands that decide it are small integer tables. Two steps:

1. `call_data`: the program is evaluated on those small inputs only (everything else unknown), up to
   each `pallas_call`, which yields its run-time grid bounds and scalar-prefetch values. A table the
   program builds from its own constants (literals, iota, shapes: a causal kernel's block-pair list, a
   splash mask's block kinds) is a compile-time constant and is evaluated even with no input values at
   all; one that reads an input (sequence lengths, a page table) stays unknown without its values.
2. `simulate_body`: the kernel body's scalar part runs over the grid in order, the prefetch tables as
   SMEM (a body may write them: ragged paged attention carries its position from step to step), vector
   work skipped. Each cond's branch taken and each while loop's iterations are counted.

Nothing here runs a candidate's Python: only jax primitives, in NumPy (the kernel body) or eagerly on
the CPU (the small ops before the kernel), never callbacks or while loops outside a kernel, and every
value and loop is capped. What cannot be evaluated stays unknown, and the estimate keeps its bound.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BodyCounts", "CallData", "call_data", "data_dependent", "simulate_body", "small_int_inputs"]

# An input above this many elements is not evaluated: the tables that decide a grid (group sizes, page
# tables, sequence lengths) are far smaller.
MAX_ELEMENTS = 1 << 16
# A value computed before a kernel (an op's result, a constant of the program) above this many elements is
# not evaluated: a constant block table of a long causal kernel (e.g. 64 heads x 128 x 128 blocks) fits.
MAX_VALUE_ELEMENTS = 1 << 20
# A scalar-part value inside a kernel body above this many elements is left unknown (vector work).
MAX_BODY_ELEMENTS = 1 << 12
# Primitive evaluations one kernel's simulation may spend (a few seconds of NumPy) before giving up.
MAX_EVALS = 3_000_000
# Grid steps simulated at most; a bigger grid keeps its bounds.
MAX_STEPS = 1 << 17

_CALL_LIKE = {"pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "remat",
              "checkpoint", "custom_vjp_call_jaxpr"}  # fmt: skip
_NEVER = ("callback", "pallas_call", "custom_call", "infeed", "outfeed", "while", "print")


@dataclasses.dataclass
class BodyCounts:
    """What a kernel body did over its grid: per cond (by equation) the times each branch ran, per loop
    the iterations and entries. Keys are id() of the body's equations (one traced jaxpr, one process)."""

    steps: int = 0
    partial: bool = False  # stopped by the budget: counts over the first `steps` steps only
    cond_taken: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    cond_unknown: dict[int, int] = dataclasses.field(default_factory=dict)
    loop_iters: dict[int, int] = dataclasses.field(default_factory=dict)
    loop_entries: dict[int, int] = dataclasses.field(default_factory=dict)
    loop_unknown: dict[int, int] = dataclasses.field(default_factory=dict)

    def copy(self) -> BodyCounts:
        return BodyCounts(
            steps=self.steps,
            partial=self.partial,
            cond_taken={k: list(v) for k, v in self.cond_taken.items()},
            cond_unknown=dict(self.cond_unknown),
            loop_iters=dict(self.loop_iters),
            loop_entries=dict(self.loop_entries),
            loop_unknown=dict(self.loop_unknown),
        )

    def branch_shares(self, eqn: Any) -> list[float] | None:
        """Share of this cond's executions that took each branch (None: never run, or a predicate unknown)."""
        taken = self.cond_taken.get(id(eqn))
        if not taken or self.cond_unknown.get(id(eqn)) or sum(taken) == 0:
            return None
        total = sum(taken)
        return [t / total for t in taken]

    def mean_trips(self, eqn: Any) -> float | None:
        """Iterations per entry of this loop (None: never entered, or a bound unknown on some entry)."""
        entries = self.loop_entries.get(id(eqn), 0)
        if not entries or self.loop_unknown.get(id(eqn)):
            return None
        return self.loop_iters.get(id(eqn), 0) / entries


@dataclasses.dataclass
class CallData:
    """One pallas_call's run-time facts, from the inputs' values (None where unknown)."""

    dynamic_bounds: list[int | None]
    prefetch: list[np.ndarray | None]
    grid: tuple[int | None, ...] = ()
    counts: BodyCounts | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    # some input's values were given; False: only the program's own constants were evaluated
    from_inputs: bool = True

    @property
    def prefetch_known(self) -> bool:
        return all(p is not None for p in self.prefetch)


# ---------------------------------------------------------------------------------------------------
# The reference's small integer inputs


def small_int_inputs(create: Any, shapes: Sequence[Any]) -> dict[int, list]:
    """{leaf position: values} of the integer inputs of at most MAX_ELEMENTS elements, from `create()`
    (the reference's create_inputs at the target size), computed under jit so that the large float
    inputs beside them are never made (XLA drops what no output needs)."""
    import jax

    picks = [
        i
        for i, s in enumerate(shapes)
        if np.issubdtype(np.dtype(s.dtype), np.integer) and math.prod(s.shape) <= MAX_ELEMENTS
    ]
    if not picks:
        return {}

    def only_tables():
        leaves = jax.tree_util.tree_leaves(create())
        return [leaves[i] for i in picks]

    with jax.default_device(jax.devices("cpu")[0]):
        values = jax.jit(only_tables)()
    return {i: np.asarray(v).tolist() for i, v in zip(picks, values, strict=True)}


# ---------------------------------------------------------------------------------------------------
# Step 1: the program up to each pallas_call


def _small(aval: Any) -> bool:
    shape = getattr(aval, "shape", None)
    return shape is not None and math.prod(shape) <= MAX_VALUE_ELEMENTS


class _Over:
    """A value that could be computed (its inputs are known) but is over MAX_VALUE_ELEMENTS: unknown, and
    said so where it reaches a kernel's prefetch operand."""

    def __repr__(self) -> str:
        return "<over the bound>"


_OVER = _Over()


def data_dependent(call: Any) -> bool:
    """Whether a pallas_call's work depends on values: a scalar-prefetch operand or a run-time grid axis.
    `call`: its PallasCallInfo, or its jaxpr equation."""
    gm = getattr(call, "params", {}).get("grid_mapping")
    if gm is not None:
        return bool(gm.num_index_operands or int(getattr(gm, "num_dynamic_grid_bounds", 0)))
    return bool(call.num_scalar_prefetch) or any(g is None for g in call.grid)


def call_data(closed_jaxpr: Any, inputs: Sequence[Any | None] = ()) -> list[CallData]:
    """Per pallas_call (find_pallas_calls' order), its dynamic grid bounds and scalar-prefetch operands
    as far as `inputs` (one per jaxpr input, None or missing: unknown) and the program's own constants
    decide them; each call's body is simulated when they are all known. With no input values at all, only
    the calls whose work depends on values (data_dependent) are simulated, on their constant tables."""
    from jax._src import core as jcore

    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    consts = list(getattr(closed_jaxpr, "consts", []))
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found: list[tuple[Any, CallData]] = []
    _partial(jaxpr, consts, list(inputs), found, jcore)
    from_inputs = any(x is not None for x in inputs)
    out = []
    for eqn, data in found:
        data.from_inputs = from_inputs
        over = [k for k, x in enumerate(data.prefetch) if x is _OVER]
        if over:
            data.notes.append(
                f"its scalar-prefetch operand(s) {', '.join(map(str, over))} are over the {MAX_VALUE_ELEMENTS}-"
                "element bound on values evaluated before a kernel: not evaluated"
            )
            data.prefetch = [None if x is _OVER else x for x in data.prefetch]
        gm = eqn.params["grid_mapping"]
        dyn = iter(data.dynamic_bounds)
        grid = []
        for g in gm.grid:
            if isinstance(g, int | np.integer):
                grid.append(int(g))
            else:
                v = next(dyn, None)
                grid.append(int(v) if v is not None else None)
        data.grid = tuple(grid)
        if data.prefetch_known and all(g is not None for g in grid) and (from_inputs or data_dependent(eqn)):
            data.counts, note = simulate_body(eqn, data.grid, data.prefetch)  # type: ignore[arg-type]
            if note:
                data.notes.append(note)
        out.append(data)
    return out


def _partial(jaxpr: Any, consts: list, args: list, found: list, jcore: Any) -> list:
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return np.asarray(v.val) if isinstance(v, jcore.Literal) else env.get(v)

    for v, x in zip(jaxpr.constvars, consts, strict=False):
        env[v] = np.asarray(x) if _small(getattr(x, "aval", np.asarray(x))) else _OVER
    for v, x in zip(jaxpr.invars, args, strict=False):
        env[v] = x
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        if name == "pallas_call":
            gm = eqn.params["grid_mapping"]
            nd = int(getattr(gm, "num_dynamic_grid_bounds", 0))
            pre = ins[nd : nd + gm.num_index_operands]
            found.append((eqn, CallData(dynamic_bounds=[_scalar(x) for x in ins[:nd]], prefetch=pre)))
            continue
        subs = list(jcore.jaxprs_in_params(eqn.params))
        if name in _CALL_LIKE and len(subs) == 1:
            sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            inner = getattr(sub, "jaxpr", sub)
            if inner is not None and len(inner.invars) == len(ins):
                outs = _partial(inner, list(getattr(sub, "consts", [])), ins, found, jcore)
                for v, x in zip(eqn.outvars, outs, strict=False):
                    env[v] = x
                continue
        if subs:
            # A loop or branch holding kernels: walked for them (in order), its values left unknown;
            # one holding none is evaluated below when its inputs are known, unless it could run long.
            if _holds_kernel(subs):
                for s in subs:
                    _partial(s, [], [None] * len(s.invars), found, jcore)
                continue
            if _could_run_long(eqn, subs):
                continue
        if any(x is None for x in ins) or any(bad in name for bad in _NEVER) or eqn.effects:
            continue
        if any(x is _OVER for x in ins) or not all(_small(v.aval) for v in eqn.outvars):
            for v in eqn.outvars:  # computable, but too large to evaluate
                env[v] = _OVER
            continue
        try:
            with np.errstate(all="ignore"):
                res = None if subs else _numeric(name, eqn.params, ins)
            if res is not None:
                res = [res]
            else:
                import jax

                with jax.default_device(jax.devices("cpu")[0]):
                    res = eqn.primitive.bind(*ins, **eqn.params)
                res = res if eqn.primitive.multiple_results else [res]
        except Exception:  # noqa: BLE001 - an op we cannot run eagerly stays unknown
            continue
        for v, x in zip(eqn.outvars, res, strict=False):
            env[v] = np.asarray(x)
    return [read(v) for v in jaxpr.outvars]


def _could_run_long(eqn: Any, subs: list) -> bool:
    """A while loop anywhere inside (its trips are a value), or a scan longer than MAX_ELEMENTS."""
    from jax._src import core as jcore

    if eqn.primitive.name == "scan" and int(eqn.params.get("length", 0)) > MAX_ELEMENTS:
        return True
    for s in subs:
        for e in s.eqns:
            inner = list(jcore.jaxprs_in_params(e.params))
            if e.primitive.name == "while" or (inner and _could_run_long(e, inner)):
                return True
    return False


def _holds_kernel(subs: list) -> bool:
    from jax._src import core as jcore

    for s in subs:
        for e in s.eqns:
            if e.primitive.name == "pallas_call" or _holds_kernel(list(jcore.jaxprs_in_params(e.params))):
                return True
    return False


def _scalar(x: Any) -> int | None:
    if x is None or x is _OVER:
        return None
    a = np.asarray(x)
    return int(a.reshape(-1)[0]) if a.size == 1 else None


# ---------------------------------------------------------------------------------------------------
# Step 2: the kernel body's scalar part over the grid


_REF_OPS = ("get", "swap", "addupdate")


class _Ref:
    """A scalar-prefetch operand as the body sees it: an SMEM array it may read and write."""

    def __init__(self, value: Any) -> None:
        self.a = np.array(value, copy=True)
        self.poisoned = False  # written with a value we could not compute: reads are unknown


class _OverBudget(Exception):
    pass


def _np_div(x: Any, y: Any) -> Any:  # lax.div rounds toward zero
    if np.issubdtype(np.asarray(x).dtype, np.integer):
        q = np.abs(x) // np.maximum(np.abs(y), 1)
        return np.where((np.asarray(x) < 0) ^ (np.asarray(y) < 0), -q, q).astype(np.asarray(x).dtype)
    return np.asarray(x) / y


_BINARY: dict[str, Any] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _np_div, "rem": np.fmod,
    "max": np.maximum, "min": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.bitwise_and,
    "or": np.bitwise_or, "xor": np.bitwise_xor, "shift_left": np.left_shift,
    "shift_right_arithmetic": np.right_shift, "pow": np.power, "atan2": np.arctan2,
}  # fmt: skip
_UNARY: dict[str, Any] = {"neg": np.negative, "abs": np.abs, "sign": np.sign, "not": np.invert,
                          "floor": np.floor, "ceil": np.ceil, "exp": np.exp, "log": np.log}  # fmt: skip


def _numeric(name: str, p: dict, ins: list) -> Any:
    """The primitives an index computation uses, in NumPy (None: not one of them)."""
    if name in _BINARY and len(ins) == 2:
        return _BINARY[name](ins[0], ins[1])
    if name in _UNARY and len(ins) == 1:
        return _UNARY[name](ins[0])
    if name == "convert_element_type":
        return np.asarray(ins[0]).astype(np.dtype(p["new_dtype"]))
    if name == "select_n":
        return np.choose(np.asarray(ins[0]).astype(np.int64), ins[1:])
    if name == "clamp":
        return np.clip(ins[1], ins[0], ins[2])
    if name == "integer_pow":
        return np.power(ins[0], int(p["y"]))
    if name == "shift_right_logical":
        a = np.asarray(ins[0])
        return (a.astype(np.uint64) >> np.asarray(ins[1]).astype(np.uint64)).astype(a.dtype)
    if name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_and", "reduce_or"):
        fn = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min,
              "reduce_and": np.all, "reduce_or": np.any}[name]  # fmt: skip
        return fn(ins[0], axis=tuple(p["axes"]))
    if name == "broadcast_in_dim":
        shape, dims = tuple(p["shape"]), tuple(p["broadcast_dimensions"])
        a = np.asarray(ins[0])
        expanded = np.reshape(a, [a.shape[dims.index(d)] if d in dims else 1 for d in range(len(shape))])
        return np.broadcast_to(expanded, shape)
    if name == "reshape":
        return np.reshape(ins[0], tuple(p["new_sizes"]))
    if name == "squeeze":
        return np.squeeze(ins[0], axis=tuple(p["dimensions"]))
    if name == "iota":
        shape, dim = tuple(p["shape"]), int(p["dimension"])
        return np.broadcast_to(
            np.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))]), shape
        ).astype(np.dtype(p["dtype"]))
    return None


class _Sim:
    def __init__(self, counts: BodyCounts, grid: tuple[int, ...]) -> None:
        self.counts, self.grid = counts, grid
        self.idx: tuple[int, ...] = ()
        self.evals = 0
        self.kept: dict[int, list] = {}
        from jax._src.core import Literal

        self.literal = Literal

    def run(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return np.asarray(v.val) if isinstance(v, self.literal) else env.get(v)

        for v, x in zip(jaxpr.constvars, consts, strict=False):
            a = np.asarray(x)
            env[v] = a if a.size <= MAX_BODY_ELEMENTS else None
        for v, x in zip(jaxpr.invars, args, strict=False):
            env[v] = x
        for eqn in self._scalar_eqns(jaxpr):
            self.evals += 1
            if self.evals > MAX_EVALS:
                raise _OverBudget
            outs = self.eqn(eqn, [read(v) for v in eqn.invars])
            if outs is None:
                continue
            for v, x in zip(eqn.outvars, outs, strict=False):
                if x is not None:
                    env[v] = x
        return [read(v) for v in jaxpr.outvars]

    def _scalar_eqns(self, jaxpr: Any) -> list:
        """The equations that can yield a known value or write a table: vector work (every output above
        MAX_BODY_ELEMENTS, no sub-jaxpr, not a ref access) and DMAs/semaphores (no outputs) are left out."""
        key = id(jaxpr)
        if key not in self.kept:
            self.kept[key] = [
                e
                for e in jaxpr.eqns
                if e.primitive.name in _REF_OPS
                or e.primitive.name in ("program_id", "num_programs", "cond", "while", "scan", *_CALL_LIKE)
                or (
                    e.outvars
                    and any(
                        math.prod(getattr(v.aval, "shape", ()) or ()) <= MAX_BODY_ELEMENTS for v in e.outvars
                    )
                )
            ]
        return self.kept[key]

    def eqn(self, eqn: Any, ins: list) -> list | None:
        name = eqn.primitive.name
        p = eqn.params
        if name == "program_id":
            return [np.int32(self.idx[int(p["axis"])])]
        if name == "num_programs":
            return [np.int32(self.grid[int(p["axis"])])]
        if name == "get":
            return [self._get(ins[0], p["tree"], ins[1:])]
        if name == "swap":
            return [self._swap(ins[0], ins[1], p["tree"], ins[2:])]
        if name in ("addupdate",) and isinstance(ins[0], _Ref):
            ins[0].poisoned = True
            return None
        if name == "cond":
            return self._cond(eqn, ins)
        if name == "while":
            return self._while(eqn, ins)
        if name == "scan":
            return self._scan(eqn, ins)
        if name in _CALL_LIKE:
            sub = p.get("jaxpr") or p.get("call_jaxpr")
            if sub is None:
                return None
            return self.run(getattr(sub, "jaxpr", sub), list(getattr(sub, "consts", [])), ins)
        if any(x is None or isinstance(x, _Ref) for x in ins):
            return None
        try:  # (outputs are small: _scalar_eqns kept only those; NumPy warnings are off for the whole run)
            out = _numeric(name, p, ins)
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError):
            return None
        return None if out is None else [np.asarray(out)]

    def _index(self, tree: Any, flat: list) -> tuple | None:
        """The NumPy index of a ref read/write, or None (a vector index, an unknown one)."""
        import jax

        if any(x is None for x in flat):
            return None
        transforms = jax.tree_util.tree_unflatten(tree, flat)
        if not transforms:
            return ()
        if len(transforms) != 1 or not hasattr(transforms[0], "indices"):
            return None
        out = []
        for ix in transforms[0].indices:
            if hasattr(ix, "start") and hasattr(ix, "size"):  # a Slice
                start = _scalar(ix.start)
                if start is None:
                    return None
                stride = int(getattr(ix, "stride", 1) or 1)
                out.append(slice(start, start + int(ix.size) * stride, stride))
            else:
                v = _scalar(ix)
                if v is None or np.asarray(ix).size != 1:
                    return None
                out.append(v)
        return tuple(out)

    def _get(self, ref: Any, tree: Any, flat: list) -> Any:
        if not isinstance(ref, _Ref) or ref.poisoned:
            return None
        idx = self._index(tree, flat)
        if idx is None:
            return None
        try:
            if any(isinstance(i, int) and not 0 <= i < n for i, n in zip(idx, ref.a.shape, strict=False)):
                return None  # out of bounds on the chip is undefined: left unknown
            return np.array(ref.a[idx], copy=True)
        except IndexError:
            return None

    def _swap(self, ref: Any, val: Any, tree: Any, flat: list) -> Any:
        if not isinstance(ref, _Ref):
            return None
        old = self._get(ref, tree, flat)
        idx = self._index(tree, flat)
        if val is None or idx is None or ref.poisoned:
            ref.poisoned = True
            return old
        try:
            ref.a[idx] = val
        except (IndexError, ValueError):
            ref.poisoned = True
        return old

    def _cond(self, eqn: Any, ins: list) -> list | None:
        branches = eqn.params["branches"]
        key = id(eqn)
        taken = self.counts.cond_taken.setdefault(key, [0] * len(branches))
        which = _scalar(ins[0])
        if which is None:
            self.counts.cond_unknown[key] = self.counts.cond_unknown.get(key, 0) + 1
            for x in ins[1:]:
                if isinstance(x, _Ref):  # the branch may write it
                    x.poisoned = True
            return None
        b = min(max(which, 0), len(branches) - 1)
        taken[b] += 1
        br = branches[b]
        return self.run(br.jaxpr, br.consts, ins[1:])

    def _while(self, eqn: Any, ins: list) -> list | None:
        p = eqn.params
        cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
        cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
        cc, bc, carry = ins[:cn], ins[cn : cn + bn], list(ins[cn + bn :])
        key = id(eqn)
        self.counts.loop_entries[key] = self.counts.loop_entries.get(key, 0) + 1
        while True:
            pred = _scalar(self.run(cj.jaxpr, cj.consts, [*cc, *carry])[0])
            if pred is None:
                self.counts.loop_unknown[key] = self.counts.loop_unknown.get(key, 0) + 1
                return None
            if not pred:
                return carry
            carry = self.run(bj.jaxpr, bj.consts, [*bc, *carry])
            self.counts.loop_iters[key] = self.counts.loop_iters.get(key, 0) + 1

    def _scan(self, eqn: Any, ins: list) -> list | None:
        p = eqn.params
        length, nc, ncarry = int(p["length"]), int(p["num_consts"]), int(p["num_carry"])
        j = p["jaxpr"]
        consts, carry, xs = ins[:nc], list(ins[nc : nc + ncarry]), ins[nc + ncarry :]
        key = id(eqn)
        self.counts.loop_entries[key] = self.counts.loop_entries.get(key, 0) + 1
        order = range(length - 1, -1, -1) if p.get("reverse") else range(length)
        for t in order:
            x_t = [None if x is None or isinstance(x, _Ref) else np.asarray(x)[t] for x in xs]
            outs = self.run(j.jaxpr, j.consts, [*consts, *carry, *x_t])
            carry = outs[:ncarry]
            self.counts.loop_iters[key] = self.counts.loop_iters.get(key, 0) + 1
        return [*carry, *([None] * (len(eqn.outvars) - ncarry))]


def _has_control(jaxpr: Any) -> bool:
    from jax._src import core as jcore

    for e in jaxpr.eqns:
        if e.primitive.name in ("cond", "while"):
            return True
        if any(_has_control(s) for s in jcore.jaxprs_in_params(e.params)):
            return True
    return False


def simulate_body(
    pallas_eqn: Any, grid: tuple[int, ...], prefetch: Sequence[Any]
) -> tuple[BodyCounts | None, str | None]:
    """Run a kernel body's scalar part over every grid step in order: (counts, None), or (None, why not).
    A body with no cond and no while loop has nothing to count: (None, None)."""
    body = pallas_eqn.params["jaxpr"]
    if not _has_control(body):
        return None, None
    steps = math.prod(grid)
    if steps > MAX_STEPS:
        return (
            None,
            f"its {steps} grid steps were not simulated (more than {MAX_STEPS}): branches and loops bounded",
        )
    counts = BodyCounts(steps=steps)
    sim = _Sim(counts, grid)
    refs = [_Ref(p) for p in prefetch]
    args = [*refs, *([None] * (len(body.invars) - len(refs)))]
    consts = list(getattr(body, "consts", []) or [])
    done = counts.copy()
    try:
        with np.errstate(all="ignore"):
            for flat in range(steps):
                sim.idx = tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else ()
                sim.run(body, consts, args)
                done = counts.copy()
    except _OverBudget:
        # The steps that ran to the end stand for the grid; stopped inside the first step, the trips it ran
        # (never back to "once": a loop that runs past the budget is charged at least those).
        if flat > 0:
            counts = done
        counts.steps, counts.partial = max(flat, 1), True
        return counts, (
            f"its body was not simulated to the end (over {MAX_EVALS} scalar evaluations, stopped in step "
            f"{flat + 1} of {steps}): the branches and loop trips of the steps it ran stand for every step, "
            "a floor for a loop it stopped inside"
        )
    except RecursionError:
        return None, "its body nests too deep to simulate: branches and loops bounded"
    return counts, None
