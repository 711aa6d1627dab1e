"""The kernel program a traced candidate runs, described so that two sizes can be compared.

A kernel validated at the check sizes is trusted at the target size only if the target runs what was
checked. Names and metadata are not the program (tpu-inference names its gmm by its shape); what the
body executes is. So for the whole candidate and for each `pallas_call` it reaches, in program order:

- **Constants are folded** through literals, `program_id`/`num_programs` (evaluated at every grid point,
  or at sampled lines of a grid too large), nested `jit`/`pjit` calls (their results come back out),
  scalar values broadcast to arrays, every integer, bit and float elementwise op, and the induction
  variable of a loop of static length (`fori_loop`: its values over the trips). A value we cannot fold
  (a load, an iota, a reduction) stays unknown.
- `ops`: the distinct primitives that run, each with the path of conds and loops it sits in
  (`cond#0[1]/swap`: cond 0, branch 1). A cond whose predicate folds contributes only the branches some
  active grid point (and trip) takes; any other cond all of them. Layout-only primitives are left out:
  jnp skips them when a shape already fits, which depends on the size. A loop of length 0 runs nothing.
- `taken`: every branch taken (`cond#0[1]`, `select#2[0]` for a `where` on a folded predicate), an
  **empty branch too**: `pl.when(i < 16)` with no else takes its empty branch only where the grid
  reaches 16. `grid_taken` are those whose predicate depends on the grid position.
- **What the grid writes and reads**: per output, the share of its blocks that a grid step which stores
  into it names (its index map at the points where the body writes: an empty branch writes nothing),
  aliased outputs included; per input, the share of its blocks the grid reads. Exact up to `MAX_EXACT`
  grid points, else per axis over sampled lines (a clamp in an index map shows either way).
- **Extents**: per operand and dimension, the share the body's loads (inputs) and stores and DMAs
  (outputs, `pl.ANY` ones included) cover, from their static or folded slices: `x_ref[:, :2048]` of a
  block 8192 wide covers a quarter.
- Outside the kernels (`outside_*`): the ops the wrapper runs and the branches of its folded conds, so
  a switch computed in a nested `jit` that skips the kernel shows.

`unvalidated(target, checked)` says what the target runs that no validated program did. Reads jax
0.10.2's jaxpr (private cond/loop/state params) through pallas_info's helpers; pure, no device.
"""

from __future__ import annotations

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
MAX_EXACT = 1 << 20  # grid points walked one by one (more: every value of each axis on sampled lines)
LINE_VALUES = 1 << 16  # at most this many values of one axis on a sampled line
LOOP_CELLS = 1 << 23  # a loop's induction values x the grid points held at once (more: left unknown)

_UNARY: dict[str, Any] = {
    "neg": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log1p": np.log1p,
    "tanh": np.tanh,
    "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "sin": np.sin,
    "cos": np.cos,
    "square": np.square,
    "is_finite": np.isfinite,
    "population_count": lambda x: np.vectorize(lambda v: bin(int(v) & ((1 << 64) - 1)).count("1"))(x),
    "stop_gradient": lambda x: x,
    "reduce_precision": lambda x: x,
    "optimization_barrier": lambda x: x,
}
_BINARY: dict[str, Any] = {
    **_NP_BINARY,
    "xor": np.bitwise_xor,
    "pow": np.power,
    "atan2": np.arctan2,
    "nextafter": np.nextafter,
    "shift_right_logical": lambda x, y: (x.astype(np.uint64) >> y.astype(np.uint64)).astype(x.dtype),
}
# a known value keeps its value through these (a scalar broadcast to a block stays that scalar)
_PASS = {"broadcast_in_dim", "reshape", "squeeze", "expand_dims", "copy", "copy_p"}


class CallProgram(BaseModel):
    """One pallas_call's program: what its body runs, where branches go, what its grid writes and reads."""

    kernel: str = Field(description="the kernel's name, for the reader only: names are not compared")
    ops: list[str] = Field(
        default_factory=list, description="distinct body primitives that run, with their path"
    )
    branches: list[str] = Field(default_factory=list, description="the branch each foldable cond takes")
    taken: list[str] = Field(default_factory=list, description="every branch taken, empty ones too")
    grid_taken: list[str] = Field(
        default_factory=list, description="the taken branches whose predicate depends on the grid position"
    )
    grid_conds: list[int] = Field(
        default_factory=list, description="the conds whose branches depend on the grid position"
    )
    dimension_semantics: list[str] | None = None
    grid: list[int | None] = Field(default_factory=list)
    coverage: list[float | None] = Field(
        default_factory=list, description="per output: the share of its blocks a writing grid step names"
    )
    read_coverage: list[float | None] = Field(
        default_factory=list, description="per input: the share of its blocks the grid reads"
    )
    extents: dict[str, float] = Field(
        default_factory=dict,
        description="'input 0 dim 1' -> the share of that dimension the body's loads (stores, for outputs) cover",
    )
    sampled: bool = Field(
        default=False, description="the grid was walked on sampled lines, not point by point"
    )


class KernelProgram(BaseModel):
    """Every pallas_call a traced candidate reaches, in program order, and what runs around them."""

    calls: list[CallProgram] = Field(default_factory=list)
    outside_ops: list[str] = Field(default_factory=list, description="ops outside the kernels that run")
    outside_taken: list[str] = Field(default_factory=list, description="branches of folded conds outside")
    outside_branches: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------------
# grid points


def _points(grid: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    """(grid points (N, rank), sampled): every point, or when there are more than MAX_EXACT, every value
    of each axis (up to LINE_VALUES, evenly spaced) with the other axes at their ends and middle."""
    if not grid:
        return np.zeros((1, 0), np.int64), False
    if math.prod(grid) <= MAX_EXACT:
        return np.indices(grid, dtype=np.int64).reshape(len(grid), -1).T, False
    fixed = [np.unique(np.array([0, (n - 1) // 2, n - 1], np.int64)) for n in grid]
    lines = []
    for a, n in enumerate(grid):
        along = np.unique(np.linspace(0, n - 1, min(n, LINE_VALUES)).astype(np.int64))
        axes = [along if b == a else fixed[b] for b in range(len(grid))]
        lines.append(np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(grid)))
    return np.unique(np.concatenate(lines), axis=0), True


# ---------------------------------------------------------------------------------------------------
# constant folding


def _fold(eqn, env: dict, read) -> None:
    """The value of an equation whose inputs are known (literals, program ids, folded values). Values are
    numpy arrays over the grid points (last axis) and loop trips (leading axes), or scalars; an array
    operand counts as its one value only when it was broadcast from a known scalar."""
    name = eqn.primitive.name
    if len(eqn.outvars) != 1:
        return
    xs = [read(v) for v in eqn.invars]
    if not xs or any(x is None for x in xs):
        return
    try:
        with np.errstate(all="ignore"):
            if name in _PASS and len(xs) == 1:
                out = xs[0]
            elif name in _BINARY and len(xs) == 2:
                out = _BINARY[name](*xs)
            elif name == "div":
                out = _np_div(*xs) if np.asarray(xs[0]).dtype.kind in "iu" else xs[0] / xs[1]
            elif name == "rem":
                out = _np_rem(*xs) if np.asarray(xs[0]).dtype.kind in "iu" else np.fmod(*xs)
            elif name == "not":
                out = np.logical_not(xs[0]) if xs[0].dtype == bool else ~xs[0]
            elif name in _UNARY and len(xs) == 1:
                out = _UNARY[name](xs[0])
            elif name == "integer_pow":
                out = np.power(xs[0], int(eqn.params["y"]))
            elif name == "convert_element_type":
                out = xs[0].astype(np.dtype(eqn.params["new_dtype"]))
            elif name == "bitcast_convert_type":
                out = np.asarray(xs[0]).view(np.dtype(eqn.params["new_dtype"]))
            elif name == "select_n":
                out = np.choose(np.asarray(xs[0]).astype(np.int64), xs[1:], mode="clip")
            elif name == "clamp":
                out = np.clip(xs[1], xs[0], xs[2])
            else:
                return
    except Exception:  # noqa: BLE001 - a value we cannot fold stays unknown
        return
    env[eqn.outvars[0]] = np.asarray(out)


# ---------------------------------------------------------------------------------------------------
# the walk


def _lab(refs: dict, v) -> str | None:
    """The operand label of a ref variable (None for a literal or anything else)."""
    try:
        return refs.get(v)
    except TypeError:  # a Literal is not hashable
        return None


class _Walk:
    """One pass over a body (a kernel's, at its grid points; or the candidate's, outside the kernels)."""

    def __init__(self, points: np.ndarray | None, grid: tuple[int, ...], *, outside: bool = False) -> None:
        self.points, self.grid, self.outside = points, grid, outside
        self.n = None if points is None else len(points)
        self.ndim = 0 if points is None else 1  # axes a folded value may have: loops lead, the points last
        self.ops: set[str] = set()
        self.branches: list[str] = []
        self.taken: set[str] = set()
        self.grid_taken: set[str] = set()
        self.grid_conds: list[int] = []
        self.conds = 0
        self.selects = 0
        self.loops = 0
        self.writes: dict[str, Any] = {}  # operand label -> the grid points where the body stores into it
        # (label, mode, dim, site) -> the slices one load/store/DMA site covers over the points and trips
        self.touched: dict[tuple[str, str, int, str], list[tuple[np.ndarray, int]]] = {}
        self.whole: set[tuple[str, str, int, str]] = set()  # ... or that it covers the whole dimension
        self.sites: dict[tuple[str, str, str], int] = {}
        self.pallas: list[Any] = []  # outside: the pallas_call equations reached, in program order
        self.shapes: dict[str, tuple[int, ...]] = {}

    # -- helpers ------------------------------------------------------------------------------------
    def _per_point(self, mask) -> Any:
        """A mask over loops and points reduced to the points (or one bool with no points)."""
        m = np.asarray(mask, bool)
        if self.n is None:
            return bool(m.any())
        if m.ndim == 0:
            return np.full(self.n, bool(m))
        return np.broadcast_to(m, m.shape[:-1] + (self.n,)).reshape(-1, self.n).any(0)

    def _record_write(self, label: str | None, mask) -> None:
        if label is None:
            return
        now = self._per_point(mask)
        old = self.writes.get(label)
        self.writes[label] = now if old is None else (old | now)

    def _touch(self, label: str | None, shape, transforms, mode: str, read, mask, prefix: str) -> None:
        """The slices of operand `label` one load/store/DMA site covers, per dimension. A site is the
        n-th access of its kind to the operand on its path (the same statement at every size)."""
        if label is None or shape is None:
            return
        n = self.sites.get((prefix, label, mode), 0)
        self.sites[(prefix, label, mode)] = n + 1
        site = f"{prefix}{'load' if mode == 'read' else 'store'}#{n}"
        self.shapes.setdefault(label, tuple(int(s) for s in shape))
        dims = len(shape)
        indexer = None
        if transforms:
            if len(transforms) != 1 or type(transforms[0]).__name__ != "NDIndexer":
                return  # a bitcast, reshape or chained view: not followed
            indexer = transforms[0]
            if getattr(indexer, "int_indexer_shape", ()):
                return  # gathered rows: not followed
        for d in range(dims):
            key = (label, mode, d, site)
            if indexer is None or d >= len(indexer.indices):
                self.whole.add(key)
                continue
            idx = indexer.indices[d]
            if type(idx).__name__ == "Slice":
                start, size, stride = idx.start, int(idx.size), int(idx.stride)
            else:
                start, size, stride = idx, 1, 1
            if stride != 1:
                self.whole.add(key)
                continue
            value = start if isinstance(start, int | np.integer) else read(start)
            if value is None:
                self.whole.add(key)  # a start we cannot fold: counted as reaching everything
                continue
            value = np.asarray(value)
            m = np.asarray(mask, bool)
            shape_b = np.broadcast_shapes(value.shape, m.shape)
            starts = np.broadcast_to(value, shape_b)[np.broadcast_to(m, shape_b)]
            if starts.size:
                self.touched.setdefault(key, []).append((np.unique(starts.astype(np.int64)), size))

    def extents(self) -> dict[str, float]:
        """(label, mode, dim) -> the share of the dimension covered, for inputs read and outputs written."""
        out: dict[str, float] = {}
        keys = set(self.touched) | self.whole
        for label, mode, d, site in sorted(keys):
            kind = "input" if label.startswith("in") else "output" if label.startswith("out") else None
            if kind is None or (kind == "input") != (mode == "read"):
                continue
            if (label, mode, d, site) in self.whole:
                share = 1.0
            else:
                n = self.shapes[label][d]
                hit = np.zeros(n + 1, np.int64)
                for starts, size in self.touched[(label, mode, d, site)]:
                    lo = np.clip(starts, 0, n)
                    hi = np.clip(starts + size, 0, n)
                    np.add.at(hit, lo, 1)
                    np.add.at(hit, hi, -1)
                share = float((np.cumsum(hit)[:n] > 0).sum()) / max(1, n)
            number = label[len("in") if kind == "input" else len("out") :]
            out[f"{kind} {number} dim {d} at {site}"] = round(share, 6)
        return out

    # -- the walk -----------------------------------------------------------------------------------
    def body(self, jaxpr, prefix: str, env: dict, refs: dict, mask) -> None:
        from jax._src import core as jcore

        def read(v):
            if isinstance(v, jcore.Literal):
                return np.asarray(v.val)
            return env.get(v)

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "program_id":
                if self.points is not None and int(eqn.params["axis"]) < self.points.shape[1]:
                    env[eqn.outvars[0]] = self.points[:, int(eqn.params["axis"])]
                continue
            if name == "num_programs":
                axis = int(eqn.params["axis"])
                if axis < len(self.grid):
                    env[eqn.outvars[0]] = np.asarray(self.grid[axis])
                continue
            if name == "pallas_call" and self.outside:
                if np.asarray(mask).any():
                    self.pallas.append(eqn)
                    self.ops.add(prefix + name)
                continue
            if name == "cond":
                self.cond(eqn, prefix, read, refs, mask)
                continue
            if name == "scan":
                self.scan(eqn, prefix, read, refs, mask)
                continue
            if name in ("get", "swap", "addupdate", "dma_start"):
                self.access(eqn, read, refs, mask, prefix)
            elif not self.outside:
                for v in eqn.invars:  # any other use of an output (a custom op): counted as a write
                    if (_lab(refs, v) or "").startswith("out") and name not in ("dma_wait", "semaphore_wait"):
                        self._record_write(_lab(refs, v), mask)
            subs = list(jcore.jaxprs_in_params(eqn.params))
            if subs:
                self.nested(eqn, name, subs, prefix, read, refs, mask, env)
                continue
            _fold(eqn, env, read)
            if name == "select_n":
                self.select(eqn, prefix, read, mask)
            if name not in LAYOUT_ONLY:
                self.ops.add(prefix + name)

    def nested(self, eqn, name, subs, prefix, read, refs, mask, env) -> None:
        """A call, a scoped allocation, a while loop or another container: its body, with the operands
        it is handed (refs and known values); a call's known results come back out."""
        from jax._src import core as jcore

        label = "" if name in TRANSPARENT else f"{name}/"
        if name == "while":
            ncond, nbody = int(eqn.params["cond_nconsts"]), int(eqn.params["body_nconsts"])
            carry = list(eqn.invars[ncond + nbody :])
            cond_j, body_j = eqn.params["cond_jaxpr"].jaxpr, eqn.params["body_jaxpr"].jaxpr
            # the carry changes every trip: only the constants keep their values
            parts = [
                (cond_j, list(eqn.invars[:ncond]), carry),
                (body_j, list(eqn.invars[ncond : ncond + nbody]), carry),
            ]
            for sub, consts, rest in parts:
                inner = {a: read(b) for a, b in zip(sub.invars, consts, strict=False) if read(b) is not None}
                inner_refs = {
                    a: _lab(refs, b)
                    for a, b in zip(sub.invars, [*consts, *rest], strict=False)
                    if _lab(refs, b)
                }
                self.body(sub, prefix + label, inner, inner_refs, mask)
            return
        for sub in subs:
            inner: dict = {}
            inner_refs: dict = {}
            if name == "run_scoped":
                pairs = list(zip(sub.constvars, eqn.invars, strict=False))
                inner_refs = {v: f"scoped{i}" for i, v in enumerate(sub.invars)}
            elif len(sub.invars) == len(eqn.invars):
                pairs = list(zip(sub.invars, eqn.invars, strict=True))
            else:
                pairs = []
            for a, b in pairs:
                if _lab(refs, b):
                    inner_refs[a] = _lab(refs, b)
                if (value := read(b)) is not None:
                    inner[a] = value
            self.body(sub, prefix + label, inner, inner_refs, mask)
            if name in TRANSPARENT and len(sub.outvars) == len(eqn.outvars):
                for a, b in zip(eqn.outvars, sub.outvars, strict=True):
                    value = np.asarray(b.val) if isinstance(b, jcore.Literal) else inner.get(b)
                    if value is not None:
                        env[a] = value

    def access(self, eqn, read, refs, mask, prefix: str) -> None:
        """A load, store or DMA: which operand it touches, where, and (stores) at which grid points."""
        import jax.tree_util as tu

        name = eqn.primitive.name
        try:
            if name == "dma_start":
                from jax._src.pallas.mosaic.primitives import _dma_unflatten

                src, dst, *_ = _dma_unflatten(eqn.params["tree"], list(eqn.invars))
                ends = [(src, "read"), (dst, "write")]
            else:
                n = 1 if name == "get" else 2
                transforms = tu.tree_unflatten(eqn.params["tree"], eqn.invars[n:])
                ends = [((eqn.invars[0], tuple(transforms)), "read" if name == "get" else "write")]
        except Exception:  # noqa: BLE001 - a private layout we cannot read: an output it names is written
            for v in eqn.invars:
                if (_lab(refs, v) or "").startswith("out"):
                    self._record_write(_lab(refs, v), mask)
            return
        for end, mode in ends:
            if isinstance(end, tuple):
                ref, transforms = end
            else:
                ref, transforms = getattr(end, "ref", end), tuple(getattr(end, "transforms", ()) or ())
            label = _lab(refs, ref)
            if label is None:
                continue
            if mode == "write":
                self._record_write(label, mask)
            shape = getattr(getattr(ref, "aval", None), "shape", None)
            try:
                self._touch(label, shape, transforms, mode, read, mask, prefix)
            except Exception:  # noqa: BLE001 - an indexer we cannot read: the site counts as whole
                continue

    def _branch_masks(self, index, count: int, mask) -> list[tuple[int, Any]]:
        """(k, mask where branch k runs) for each branch some active point (and trip) takes."""
        values = np.clip(np.asarray(index).astype(np.int64), 0, count - 1)
        m = np.asarray(mask, bool)
        out = []
        for k in range(count):
            mk = m & (values == k)
            if np.any(mk):
                out.append((k, mk))
        return out

    def cond(self, eqn, prefix: str, read, refs, mask) -> None:
        number = self.conds
        self.conds += 1
        branches = eqn.params["branches"]
        index = read(eqn.invars[0])
        runs: list[tuple[int, Any]] = [(k, mask) for k in range(len(branches))]
        if index is not None:
            runs = self._branch_masks(index, len(branches), mask)
            over_grid = np.asarray(index).ndim > 0
            how = "over the grid" if over_grid else "a constant predicate"
            if over_grid:
                self.grid_conds.append(number)
            taken = [k for k, _ in runs]
            self.branches.append(f"cond #{number} takes branch {', '.join(map(str, taken))} ({how})")
            for k in taken:
                key = f"{prefix}cond#{number}[{k}]"
                self.taken.add(key)
                if over_grid:
                    self.grid_taken.add(key)
        operands = eqn.invars[1:]
        for k, mk in runs:
            sub = branches[k].jaxpr
            inner, inner_refs = {}, {}
            for a, b in zip(sub.invars, operands, strict=False):
                value = read(b)
                if value is not None:
                    inner[a] = value
                if _lab(refs, b):
                    inner_refs[a] = _lab(refs, b)
            self.body(sub, f"{prefix}cond#{number}[{k}]/", inner, inner_refs, mk)

    def select(self, eqn, prefix: str, read, mask) -> None:
        """A `where` whose predicate folds: which cases it takes, like a cond's branches."""
        index = read(eqn.invars[0])
        if index is None:
            return
        number = self.selects
        self.selects += 1
        over_grid = np.asarray(index).ndim > 0
        for k, _ in self._branch_masks(index, len(eqn.invars) - 1, mask):
            key = f"{prefix}select#{number}[{k}]"
            self.taken.add(key)
            if over_grid:
                self.grid_taken.add(key)

    def scan(self, eqn, prefix: str, read, refs, mask) -> None:
        """A loop of static length: its body runs (never, at length 0); an induction variable (a
        `fori_loop`'s index) takes its values over the trips as a new leading axis."""
        p = eqn.params
        body = p["jaxpr"].jaxpr
        nconsts, ncarry, length = int(p["num_consts"]), int(p["num_carry"]), int(p["length"])
        number = self.loops
        self.loops += 1
        if length == 0:
            return
        inner, inner_refs = {}, {}
        for i, (a, b) in enumerate(zip(body.invars, eqn.invars, strict=False)):
            if _lab(refs, b):
                inner_refs[a] = _lab(refs, b)
            if i < nconsts and (value := read(b)) is not None:
                inner[a] = value
        cells = length * (self.n or 1)
        grew = False
        if cells <= LOOP_CELLS:
            steps = {}
            for e in body.eqns:
                if e.primitive.name == "add" and len(e.outvars) == 1:
                    steps[e.outvars[0]] = e.invars
            from jax._src import core as jcore

            for c in range(ncarry):
                a, out = body.invars[nconsts + c], body.outvars[c]
                init = read(eqn.invars[nconsts + c])
                ins = steps.get(out)
                if init is None or ins is None or a not in ins:
                    continue
                other = ins[1] if ins[0] is a else ins[0]
                if not isinstance(other, jcore.Literal):
                    continue
                trips = np.arange(length).reshape((length,) + (1,) * self.ndim)
                if p.get("reverse"):
                    trips = trips[::-1]
                inner[a] = np.asarray(init) + np.asarray(other.val) * trips
                grew = True
        if grew:
            self.ndim += 1
        try:
            self.body(body, f"{prefix}scan#{number}/", inner, inner_refs, mask)
        finally:
            if grew:
                self.ndim -= 1


def _labels(info, jaxpr) -> dict:
    """The body's operand refs -> 'prefetch0', 'in0', 'out0', 'scratch0'."""
    refs = {}
    names = (
        [f"prefetch{i}" for i in range(info.num_scalar_prefetch)]
        + [f"in{i}" for i in range(len(info.inputs))]
        + [f"out{i}" for i in range(len(info.outputs))]
    )
    for i, v in enumerate(jaxpr.invars):
        refs[v] = names[i] if i < len(names) else f"scratch{i - len(names)}"
    return refs


def _block_coverage(b, imap, points: np.ndarray | None, sampled: bool) -> float | None:
    """The share of operand b's blocks its index map names at `points`; sampled: per block dimension."""
    if (
        points is None
        or not b.pipelined
        or b.uses_scalar_prefetch
        or imap is None
        or any(k not in ("blocked", "squeezed") for k in b.block_dims)
    ):
        return None
    if len(points) == 0:
        return 0.0
    try:
        idx = imap.evaluate(points)
    except Exception:  # noqa: BLE001 - a map we cannot evaluate tells nothing
        return None
    counts = [-(-a // (s or 1)) for a, s in zip(b.array_shape, b.block_shape, strict=False)]
    inside = np.all((idx >= 0) & (idx < np.asarray(counts)), axis=1)
    if not inside.any():
        return 0.0
    idx = idx[inside]
    if sampled:  # per dimension: a clamp caps one of them
        share = 1.0
        for d, n in enumerate(counts):
            share *= len(np.unique(idx[:, d])) / max(1, min(n, len(np.unique(points, axis=0))))
        return round(min(1.0, share), 6)
    return round(len(np.unique(idx, axis=0)) / max(1, math.prod(counts)), 6)


def _call_program(info, eqn) -> CallProgram:
    known = all(g is not None for g in info.grid)
    grid = tuple(int(g) for g in info.grid) if known else ()
    points, sampled = _points(grid) if known else (None, False)  # a run-time grid: program ids unknown
    walk = _Walk(points, grid)
    body = eqn.params["jaxpr"]
    body = getattr(body, "jaxpr", body)
    refs = _labels(info, body)
    walk.body(body, "", {}, refs, np.ones(len(points), bool) if points is not None else np.bool_(True))
    maps = index_maps(info)
    coverage, reads = [], []
    for j, b in enumerate(info.outputs):
        written = walk.writes.get(f"out{j}")
        at = None
        if points is not None:
            at = points[np.asarray(written, bool)] if written is not None else points[:0]
        coverage.append(_block_coverage(b, maps[len(info.inputs) + j], at, sampled))
    for j, b in enumerate(info.inputs):
        reads.append(_block_coverage(b, maps[j], points, sampled))
    return CallProgram(
        kernel=info.kernel_name,
        ops=sorted(walk.ops),
        branches=walk.branches,
        taken=sorted(walk.taken),
        grid_taken=sorted(walk.grid_taken),
        grid_conds=walk.grid_conds,
        dimension_semantics=list(info.dimension_semantics) if info.dimension_semantics else None,
        grid=list(info.grid),
        coverage=coverage,
        read_coverage=reads,
        extents=walk.extents(),
        sampled=sampled,
    )


def kernel_program(closed_jaxpr: Any) -> KernelProgram:
    """The program of a traced candidate: what runs outside its kernels, and each kernel it reaches."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    infos = find_pallas_calls(jaxpr)
    by_eqn = {id(e): info for info, e in zip(infos, _pallas_eqns(jaxpr), strict=False)}
    outside = _Walk(None, (), outside=True)
    outside.body(jaxpr, "", {}, {}, np.bool_(True))
    calls = [_call_program(by_eqn[id(e)], e) for e in outside.pallas if id(e) in by_eqn]
    return KernelProgram(
        calls=calls,
        outside_ops=sorted(outside.ops),
        outside_taken=sorted(outside.taken),
        outside_branches=outside.branches,
    )


def _pallas_eqns(jaxpr):
    from jax._src import core as jcore

    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
            continue
        for sub in jcore.jaxprs_in_params(eqn.params):
            yield from _pallas_eqns(sub)


# ---------------------------------------------------------------------------------------------------
# comparing sizes


def _label(t: CallProgram, i: int, n: int) -> str:
    return f"pallas_call {i} ({t.kernel})" if n > 1 else t.kernel


def differences(
    target: KernelProgram, checked: KernelProgram, at: str, where: str, *, over_grid: bool = True
) -> list[str]:
    """What the program at the target (`at`) runs that the one validated at `where` does not, and the
    reverse: empty when they are the same program (block and grid sizes, and names, aside). `over_grid=False`
    leaves out what depends on the grid position (the branches a longer grid reaches, the share of blocks
    it writes and reads): `unvalidated` asks that of the union of every validated size."""
    out: list[str] = []
    if len(target.calls) != len(checked.calls):
        return [f"{len(target.calls)} pallas_call(s) run at {at}, {len(checked.calls)} at {where}"]
    only_t = sorted(set(target.outside_ops) - set(checked.outside_ops))
    only_c = sorted(set(checked.outside_ops) - set(target.outside_ops))
    if only_t or only_c:
        parts = [f"runs {_few(only_t)} only at {at}"] if only_t else []
        parts += [f"runs {_few(only_c)} only at {where}"] if only_c else []
        out.append(f"the code around the kernels {' and '.join(parts)}")
    moved = sorted(set(target.outside_taken) ^ set(checked.outside_taken))
    if moved and not (only_t or only_c):
        why = [b for b in target.outside_branches if b not in checked.outside_branches]
        out.append(
            f"the code around the kernels takes other branches at {at} ({'; '.join(why) or _few(moved)})"
        )
    n = len(target.calls)
    for i, (t, c) in enumerate(zip(target.calls, checked.calls, strict=True)):
        call = _label(t, i, n)
        grid = {f"cond#{g}[" for g in (*t.grid_conds, *c.grid_conds)} if not over_grid else set()
        t_ops = {o for o in t.ops if not any(g in o for g in grid)}
        c_ops = {o for o in c.ops if not any(g in o for g in grid)}
        only_t, only_c = sorted(t_ops - c_ops), sorted(c_ops - t_ops)
        if only_t or only_c:
            parts = []
            if only_t:
                parts.append(f"runs {_few(only_t)} only at {at}")
            if only_c:
                parts.append(f"runs {_few(only_c)} only at {where}")
            why = [b for b in t.branches if b not in c.branches]
            because = f" ({'; '.join(why)} at {at})" if why else ""
            out.append(f"{call}'s body {' and '.join(parts)}{because}")
        fixed_t = {k for k in t.taken if k not in t.grid_taken and not any(g in k for g in grid)}
        fixed_c = {k for k in c.taken if k not in c.grid_taken and not any(g in k for g in grid)}
        if fixed_t != fixed_c and not (only_t or only_c):
            moved = sorted(fixed_t ^ fixed_c)
            out.append(f"{call}'s body takes other branches at {at} than at {where} ({_few(moved)})")
        if t.dimension_semantics != c.dimension_semantics:
            out.append(
                f"{call}'s grid semantics are {_sem(t.dimension_semantics)} at {at}, "
                f"{_sem(c.dimension_semantics)} at {where}"
            )
        if over_grid:
            theirs, whole = _grid_features(c, where), _whole([c])
            out += [
                f"{call}{v} at {at}, not at {where}"
                for k, v in _grid_features(t, at).items()
                if k not in theirs and (not k.startswith("part of ") or k in whole)
            ]
    return sorted(dict.fromkeys(out), key=out.index)


def _grid_features(c: CallProgram, at: str) -> dict[str, str]:
    """What one call does that depends on its grid, keyed so that two sizes compare (the words say the
    numbers at `at`): branches taken over the grid, the ops under them, and every output written, input
    read or operand dimension covered only in part."""
    feats = {f"takes {k}": f" takes {k} over the grid" for k in c.grid_taken}
    grid = {f"cond#{g}[" for g in c.grid_conds}
    feats |= {
        f"runs {o}": f"'s body runs {o}, under a branch on the grid"
        for o in c.ops
        if any(g in o for g in grid)
    }
    how = "sampled lines of " if c.sampled else ""
    for j, share in enumerate(c.coverage):
        if share is not None and share < 1:
            feats[f"writes part of output {j}"] = (
                f"'s grid writes {share * 100:.3g}% of output {j}'s blocks ({how}grid {tuple(c.grid)})"
            )
    for j, share in enumerate(c.read_coverage):
        if share is not None and share < 1:
            feats[f"reads part of input {j}"] = (
                f"'s grid reads {share * 100:.3g}% of input {j}'s blocks ({how}grid {tuple(c.grid)})"
            )
    for key, share in c.extents.items():
        if share < 1:
            verb = "loads" if key.startswith("input") else "stores"
            feats[f"part of {key}"] = f"'s body {verb} {share * 100:.3g}% of {key}"
    return feats


def _whole(programs: list[CallProgram]) -> set[str]:
    """The load/store sites some program ran over the whole of their dimension."""
    return {f"part of {k}" for p in programs for k, share in p.extents.items() if share >= 1}


def unvalidated(target: KernelProgram, checked: dict[str, KernelProgram], at: str) -> tuple[list[str], str]:
    """(what the target runs that no validated program did, the nearest size): empty where one validated
    program is the target's, grid aside, and every branch the target's grid takes, op under it and part
    of an operand it leaves out was taken, run or left out at some validated size too."""
    if not checked:
        return ["no size was validated"], ""
    fixed = {n: differences(target, p, at, n, over_grid=False) for n, p in checked.items()}
    nearest = min(fixed, key=lambda n: len(fixed[n]))
    if fixed[nearest]:
        return fixed[nearest], nearest
    # what the grid reaches is drawn from every validated size that runs the same kernels (a grown size
    # whose unrolled prologue numbers its conds otherwise still ran the branch or the part it reached)
    same = [p for p in checked.values() if len(p.calls) == len(target.calls)]
    out = []
    for i, t in enumerate(target.calls):
        seen: set[str] = set()
        for p in same:
            seen |= set(_grid_features(p.calls[i], at))
        whole = _whole([p.calls[i] for p in same])
        new = {
            k: v
            for k, v in _grid_features(t, at).items()
            if k not in seen
            and (not k.startswith("part of ") or k in whole)  # a site no size ran whole: chunks
        }
        out += [f"{_label(t, i, len(target.calls))}{v} at {at}, at no validated size" for v in new.values()]
    return out, nearest


def _few(ops: list[str], n: int = 6) -> str:
    return ", ".join(ops[:n]) + (f" and {len(ops) - n} more" if len(ops) > n else "")


def _sem(s: list[str] | None) -> str:
    return "unset" if s is None else f"({', '.join(s)})"
