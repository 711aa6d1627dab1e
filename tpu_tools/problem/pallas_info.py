"""What a traced candidate asks of Pallas: every `pallas_call`, its grid, blocks, scratch and hints.

Compile reports and the static estimate need the kernel's own description (grid, BlockSpecs, scratch,
`pl.CostEstimate`), not XLA's view of it: in interpret mode XLA counts one grid step, and a TPU-lowered
`pallas_call` is an opaque custom call. So we read the `pallas_call` equations of the jaxpr, recursing
into every sub-jaxpr (jit/pjit, custom_jvp/vjp, cond/while/scan bodies, closed_call).

Facts come from jax 0.10.2's internal objects (`eqn.params["grid_mapping"]`, `BlockMapping`,
`index_map_jaxpr`); they are private, so everything touching them lives here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr

__all__ = [
    "BlockInfo",
    "CostEstimateInfo",
    "IndexMap",
    "PallasCallInfo",
    "ScratchInfo",
    "UnknownIndexError",
    "bounded_grid",
    "call_info",
    "find_pallas_calls",
    "index_maps",
]


class CostEstimateInfo(BaseModel):
    """The kernel author's `pl.CostEstimate`, for the whole call."""

    flops: int
    transcendentals: int
    bytes_accessed: int
    remote_bytes_transferred: int = 0


class BlockInfo(BaseModel):
    """One input or output operand as the kernel's BlockSpec slices it."""

    role: Literal["input", "output"]
    position: int = Field(description="index among the call's inputs (or outputs)")
    origin: str = Field(description="jax's name for the operand, e.g. 'args[0]', 'outputs'")
    array_shape: tuple[int, ...]
    dtype: str
    block_shape: tuple[int | None, ...] = Field(description="one entry per array dim; None = squeezed")
    block_dims: tuple[str, ...] = Field(description="blocked|squeezed|element|bounded|indirect per dim")
    memory_space: str = Field(description="vmem|smem|any|hbm|... ('vmem' when the spec named none)")
    pipelined: bool = Field(description="the Pallas pipeline DMAs this block between HBM and VMEM/SMEM")
    has_index_map: bool = Field(description="False when the block is the whole array at index 0")
    uses_scalar_prefetch: bool = Field(description="the index map reads scalar-prefetch operands")
    block_bytes: int = Field(description="bytes of one block (unpadded)")
    buffer_count: int | None = Field(default=None, description="pl.Buffered(n) if the spec set it; else 2")


class ScratchInfo(BaseModel):
    shape: tuple[int, ...]
    dtype: str
    memory_space: str
    bytes: int = Field(description="0 for semaphores and other non-array scratch")


class PallasCallInfo(BaseModel):
    """One `pallas_call` as written by its author (JSON-able)."""

    kernel_name: str
    name: str | None = Field(default=None, description="the `name=` passed to pallas_call, if any")
    source: str | None = Field(default=None, description="'file:line' of the kernel function")
    path: str = Field(description="where in the traced program, e.g. 'jit(mm)/pallas_call'")
    grid: tuple[int | None, ...] = Field(description="None for a dynamic grid dimension")
    num_scalar_prefetch: int
    scalar_prefetch_shapes: list[tuple[int, ...]] = Field(default_factory=list)
    dimension_semantics: tuple[str, ...] | None = None
    vmem_limit_bytes: int | None = Field(default=None, description="from compiler_params, if given")
    inputs: list[BlockInfo]
    outputs: list[BlockInfo]
    scratch: list[ScratchInfo]
    cost_estimate: CostEstimateInfo | None = None
    interpret: bool
    input_output_aliases: list[tuple[int, int]] = Field(default_factory=list)
    remote_dmas: int = Field(default=0, description="DMAs to another device (device_id set), as traced")
    remote_dma_bytes: int = Field(
        default=0, description="bytes those DMAs send, as traced (loops counted once)"
    )

    _index_maps: list[IndexMap] = PrivateAttr(default_factory=list)

    @property
    def num_steps(self) -> int | None:
        if any(g is None for g in self.grid):
            return None
        return math.prod(self.grid)  # type: ignore[arg-type]

    @property
    def blocks(self) -> list[BlockInfo]:
        return [*self.inputs, *self.outputs]


def index_maps(info: PallasCallInfo) -> list[IndexMap]:
    """Evaluators for the index map of each block of `info.blocks` (inputs, then outputs)."""
    return info._index_maps


def _blocks_walked(info: PallasCallInfo, axis: int) -> tuple[int, str] | None:
    """The most steps grid axis `axis` can take before some block it moves runs off its array: for each
    pipelined block whose index map moves with the axis (read without scalar prefetch), its blocks left
    along that dim over the step; the largest, and whose it is. None when no block moves with it."""
    rank = len(info.grid)
    best: tuple[int, str] | None = None
    for b, imap in zip(info.blocks, index_maps(info), strict=False):
        if not b.pipelined or b.uses_scalar_prefetch or imap is None:
            continue
        pts = np.zeros((2, rank), np.int64)
        pts[1, axis] = 1
        try:
            idx = imap.evaluate(pts)
        except Exception:  # noqa: BLE001 - a map we cannot evaluate bounds nothing
            continue
        for j, (size, kind) in enumerate(zip(b.block_shape, b.block_dims, strict=False)):
            step = int(idx[1, j] - idx[0, j])
            if step <= 0 or not size or kind != "blocked" or j >= len(b.array_shape):
                continue
            n = -(-(-(-b.array_shape[j] // size) - int(idx[0, j])) // step)
            if n > 0 and (best is None or n > best[0]):
                best = (n, f"{b.role} {b.position}'s {-(-b.array_shape[j] // size)} blocks along dim {j}")
    return best


def _most_blocks(info: PallasCallInfo) -> int | None:
    """The most blocks any pipelined operand holds (its array over its block shape, dim by dim)."""
    counts = [
        math.prod(-(-a // (size or 1)) for a, size in zip(b.array_shape, b.block_shape, strict=False))
        for b in info.blocks
        if b.pipelined and len(b.block_shape) == len(b.array_shape)
    ]
    return max(counts) if counts else None


def bounded_grid(info: PallasCallInfo) -> tuple[tuple[int, ...], list[str]]:
    """The grid with each run-time (dynamic) axis at the most it can run, and why: the one rule that the
    estimate (its steps) and the work census (the body's work x its steps) share.

    A grid axis known only at run time (megablox gmm's m-tile count depends on the group sizes; a MoE
    kernel's token-tile count) walks tables handed in as scalar-prefetch operands, or the blocks of an
    operand. Its index maps read the tables at that program id, so it cannot run past the longest of them
    (gmm: tiles_m + num_groups - 1, its exact bound), nor past the blocks its largest operand holds; a block
    whose index moves with it runs off its array after its blocks along that dim. The smaller where both
    are known: an upper bound, said so. With neither, it counts as 1, also said so.
    """
    lengths = [s[0] for s in info.scalar_prefetch_shapes if s]
    tables = max(lengths) if lengths else None
    most = _most_blocks(info)
    table_note = "the longest scalar-prefetch operand its index maps can read"
    if tables and most and most < tables:
        # A table longer than any operand has blocks buys steps that could only revisit them: an upper
        # bound a kernel could inflate (a long dummy table) to claim work it does not do.
        tables, table_note = (
            most,
            f"{table_note} ({max(lengths)}), at most the {most} blocks of its largest operand",
        )
    grid, notes = [], []
    for i, g in enumerate(info.grid):
        if g is not None:
            grid.append(int(g))
            continue
        walked = _blocks_walked(info, i)
        bounds = [(tables, table_note)] if tables else []
        bounds += [(walked[0], f"{walked[1]}, which its index map walks")] if walked else []
        if not bounds:
            grid.append(1)
            notes.append(
                f"grid axis {i} is known only at run time and neither a scalar-prefetch operand nor a block "
                "it moves bounds it: counted as 1"
            )
            continue
        n, why = min(bounds)
        grid.append(int(n))
        notes.append(
            f"grid axis {i} is known only at run time: bounded by {n}, {why} (an upper bound; the run-time "
            "count depends on the data)"
        )
    return tuple(grid), notes


# ---------------------------------------------------------------------------------------------------
# Index-map evaluation


class UnknownIndexError(RuntimeError):
    """The index map depends on scalar-prefetch values we were not given."""


# Primitives a typical index map uses, evaluated with numpy so a grid of a million steps costs
# milliseconds. Anything else falls back to jax (vmap, eager) - correct, slower.
_NP_BINARY: dict[str, Any] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "shift_left": np.left_shift,
    "shift_right_arithmetic": np.right_shift,
}


def _np_div(x, y):  # lax.div on integers rounds toward zero
    q = np.abs(x) // np.maximum(np.abs(y), 1)
    return np.where((x < 0) ^ (y < 0), -q, q)


def _np_rem(x, y):  # lax.rem takes the sign of the dividend
    return x - _np_div(x, y) * y


def _eval_numpy(jaxpr, args: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """Evaluate a pure integer jaxpr on numpy arrays; None if it uses a primitive we don't know."""
    from jax._src import core as jcore

    env: dict[Any, Any] = {}

    def read(v):
        return np.asarray(v.val) if isinstance(v, jcore.Literal) else env[v]

    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        xs = [read(v) for v in eqn.invars]
        if name in _NP_BINARY:
            out = _NP_BINARY[name](*xs)
        elif name == "div":
            out = _np_div(*xs)
        elif name == "rem":
            out = _np_rem(*xs)
        elif name == "neg":
            out = -xs[0]
        elif name == "not":
            out = ~xs[0] if xs[0].dtype != bool else np.logical_not(xs[0])
        elif name == "convert_element_type":
            out = xs[0].astype(np.dtype(eqn.params["new_dtype"]))
        elif name == "select_n":
            out = np.choose(xs[0].astype(np.int64), xs[1:])
        elif name == "clamp":
            out = np.clip(xs[1], xs[0], xs[2])
        elif name in ("pjit", "jit", "closed_call"):
            sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            inner = sub.jaxpr if hasattr(sub, "jaxpr") else sub
            if getattr(sub, "consts", None):
                return None
            res = _eval_numpy(inner, xs)
            if res is None:
                return None
            for v, r in zip(eqn.outvars, res, strict=True):
                env[v] = r
            continue
        else:
            return None
        env[eqn.outvars[0]] = out
    return [read(v) for v in jaxpr.outvars]


@dataclasses.dataclass(frozen=True)
class IndexMap:
    """Evaluates one block's index map at grid points (an internal handle, not part of the JSON)."""

    closed_jaxpr: Any  # jax ClosedJaxpr: (*program_ids, *scalar_prefetch) -> block indices
    grid_rank: int
    num_scalar_prefetch: int
    num_outputs: int
    uses_scalar_prefetch: bool

    def evaluate(self, points: np.ndarray, scalar_prefetch: Sequence[Any] | None = None) -> np.ndarray:
        """Block indices (N, block_rank) for grid points (N, grid_rank).

        Raises UnknownIndexError when the map reads scalar-prefetch values and none were given.
        Element dims return element offsets, as the map does.
        """
        points = np.asarray(points, dtype=np.int32).reshape(-1, self.grid_rank)
        n = points.shape[0]
        if self.uses_scalar_prefetch and scalar_prefetch is None:
            raise UnknownIndexError("index map reads scalar-prefetch values; pass them to evaluate it")
        prefetch = list(scalar_prefetch or [])
        if not self.uses_scalar_prefetch:
            # The prefetch operands are unread: any value of the right shape will do.
            prefetch = [np.zeros(a.shape, a.dtype) for a in self.closed_jaxpr.in_avals[self.grid_rank :]]
        cols = [points[:, d] for d in range(self.grid_rank)]
        res = None
        if not self.closed_jaxpr.consts and not self.uses_scalar_prefetch:
            res = _eval_numpy(self.closed_jaxpr.jaxpr, [*cols, *[np.asarray(p) for p in prefetch]])
        if res is None:
            res = self._evaluate_jax(cols, prefetch)
        out = np.zeros((n, self.num_outputs), dtype=np.int64)
        for j, r in enumerate(res[: self.num_outputs]):
            out[:, j] = np.broadcast_to(np.asarray(r, dtype=np.int64), (n,))
        return out

    def at(self, point: Sequence[int], scalar_prefetch: Sequence[Any] | None = None) -> tuple[int, ...]:
        return tuple(int(x) for x in self.evaluate(np.asarray([point]), scalar_prefetch)[0])

    def _evaluate_jax(self, cols, prefetch) -> list[np.ndarray]:
        import jax
        from jax._src import core as jcore
        from jax._src.state import discharge as state_discharge

        pure = state_discharge.discharge_state(self.closed_jaxpr)
        fn = jcore.jaxpr_as_fun(pure)
        nprog = self.grid_rank
        in_axes = (0,) * nprog + (None,) * len(prefetch)
        with jax.default_device(jax.devices("cpu")[0]):
            res = jax.vmap(lambda *a: fn(*a)[: self.num_outputs], in_axes=in_axes)(*cols, *prefetch)
        return [np.asarray(r) for r in res]


def _reads_prefetch(closed_jaxpr, grid_rank: int) -> bool:
    jaxpr = closed_jaxpr.jaxpr
    prefetch_vars = set(jaxpr.invars[grid_rank:])
    if not prefetch_vars:
        return False
    from jax._src import core as jcore

    def uses(j, vars_) -> bool:
        for eqn in j.eqns:
            if any(not isinstance(v, jcore.Literal) and v in vars_ for v in eqn.invars):
                return True
        return any(not isinstance(v, jcore.Literal) and v in vars_ for v in j.outvars)

    return uses(jaxpr, prefetch_vars)


# ---------------------------------------------------------------------------------------------------
# Reading pallas_call equations


def _memory_space_name(ms: Any) -> str:
    if ms is None:
        return "vmem"
    value = getattr(ms, "value", None)
    text = str(value if isinstance(value, str) else ms).lower()
    # pl.MemorySpace.DEFAULT on TPU is VMEM: the pipeline stages the block there.
    return {"default": "vmem", "semaphore_mem": "semaphore", "vmem_shared": "vmem_shared"}.get(text, text)


def _block_dim(d: Any) -> tuple[int | None, str]:
    kind = type(d).__name__.lower()
    if kind == "squeezed":
        return None, "squeezed"
    size = getattr(d, "block_size", None)
    if kind == "boundedslice":
        kind = "bounded"
    if size is None:  # a plain int in older jax
        return (int(d) if d is not None else None), ("blocked" if d is not None else "squeezed")
    return int(size), kind


def _itemsize(dtype: Any) -> int:
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return int(getattr(dtype, "itemsize", 0) or 0)


def _block_info(bm, role: str, position: int, grid_rank: int) -> tuple[BlockInfo, IndexMap]:
    dims = [_block_dim(d) for d in bm.block_shape]
    block_shape = tuple(s for s, _ in dims)
    aval = bm.array_aval
    ms = _memory_space_name(getattr(bm.transformed_block_aval, "memory_space", None))
    uses_prefetch = _reads_prefetch(bm.index_map_jaxpr, grid_rank)
    try:
        trivial = bool(bm.has_trivial_window())
    except Exception:  # noqa: BLE001 - a jax-internal helper; losing it only loses a hint
        trivial = False
    nbytes = math.prod(s for s in block_shape if s is not None) * _itemsize(aval.dtype)
    info = BlockInfo(
        role=role,  # type: ignore[arg-type]
        position=position,
        origin=str(bm.origin),
        array_shape=tuple(int(s) for s in aval.shape),
        dtype=str(np.dtype(aval.dtype)) if _itemsize(aval.dtype) else str(aval.dtype),
        block_shape=block_shape,
        block_dims=tuple(k for _, k in dims),
        memory_space=ms,
        pipelined=ms in ("vmem", "smem"),
        has_index_map=not trivial,
        uses_scalar_prefetch=uses_prefetch,
        block_bytes=nbytes,
        buffer_count=getattr(bm.pipeline_mode, "buffer_count", None),
    )
    imap = IndexMap(
        closed_jaxpr=bm.index_map_jaxpr,
        grid_rank=grid_rank,
        num_scalar_prefetch=len(bm.index_map_jaxpr.in_avals) - grid_rank,
        num_outputs=len(bm.block_shape),
        uses_scalar_prefetch=uses_prefetch,
    )
    return info, imap


def _scratch_info(aval) -> ScratchInfo:
    inner = getattr(aval, "inner_aval", aval)
    shape = tuple(int(s) for s in getattr(inner, "shape", ()))
    dtype = getattr(inner, "dtype", None)
    size = _itemsize(dtype) if dtype is not None else 0
    ms = _memory_space_name(getattr(aval, "memory_space", None))
    is_sem = ms == "semaphore" or "sem" in str(dtype).lower()
    return ScratchInfo(
        shape=shape,
        dtype=str(dtype),
        memory_space="semaphore" if is_sem else ms,
        bytes=0 if is_sem else math.prod(shape) * size,
    )


def _compiler_param(cp: Any, key: str) -> Any:
    if cp is None:
        return None
    if isinstance(cp, dict):  # older jax: {"mosaic": {...}}
        for v in cp.values():
            if isinstance(v, dict) and key in v:
                return v[key]
        return cp.get(key)
    return getattr(cp, key, None)


_SRC = re.compile(r"^(?P<name>.*?) at (?P<src>.+)$")


def _kernel_name_and_source(params: dict) -> tuple[str, str | None]:
    jaxpr = params.get("jaxpr")
    dbg = getattr(jaxpr, "debug_info", None)
    src_info = getattr(dbg, "func_src_info", None) or ""
    m = _SRC.match(src_info)
    if m:
        return m.group("name"), m.group("src")
    name = getattr(dbg, "func_name", None) or params.get("name") or "<kernel>"
    return str(name), None


def _call_info(eqn, path: str) -> PallasCallInfo:
    p = eqn.params
    gm = p["grid_mapping"]
    grid = tuple(int(g) if isinstance(g, int | np.integer) else None for g in gm.grid)
    rank = len(gm.grid)
    blocks, imaps = [], []
    for i, bm in enumerate(gm.block_mappings):
        role = "input" if i < gm.num_inputs else "output"
        b, m = _block_info(bm, role, i if role == "input" else i - gm.num_inputs, rank)
        blocks.append(b)
        imaps.append(m)
    sem = _compiler_param(p.get("compiler_params"), "dimension_semantics")
    if sem is not None:
        sem = tuple(str(getattr(s, "value", s)).lower() for s in sem)
    vmem_limit = _compiler_param(p.get("compiler_params"), "vmem_limit_bytes")
    ce = p.get("cost_estimate")
    kernel_name, source = _kernel_name_and_source(p)
    interpret = p.get("interpret", False)
    n_remote, remote_bytes = remote_dma_census(p.get("jaxpr"))
    info = PallasCallInfo(
        remote_dmas=n_remote,
        remote_dma_bytes=remote_bytes,
        kernel_name=kernel_name,
        name=p.get("name"),
        source=source,
        path=path,
        grid=grid,
        num_scalar_prefetch=gm.num_index_operands,
        scalar_prefetch_shapes=[tuple(int(s) for s in a.shape) for a in gm.index_map_avals[rank:]],
        dimension_semantics=sem,
        vmem_limit_bytes=int(vmem_limit) if vmem_limit is not None else None,
        inputs=blocks[: gm.num_inputs],
        outputs=blocks[gm.num_inputs :],
        scratch=[_scratch_info(a) for a in gm.scratch_avals],
        cost_estimate=(
            CostEstimateInfo(
                flops=ce.flops,
                transcendentals=ce.transcendentals,
                bytes_accessed=ce.bytes_accessed,
                remote_bytes_transferred=getattr(ce, "remote_bytes_transferred", 0),
            )
            if ce is not None
            else None
        ),
        interpret=bool(interpret) if isinstance(interpret, bool) else interpret is not None,
        input_output_aliases=[tuple(a) for a in p.get("input_output_aliases", ())],
    )
    info._index_maps = imaps
    return info


def _eqn_label(eqn) -> str:
    name = eqn.primitive.name
    fn = eqn.params.get("name")
    return f"{name}({fn})" if isinstance(fn, str) and name != "pallas_call" else name


def _walk(jaxpr, prefix: str) -> Iterator[tuple[Any, str]]:
    from jax._src import core as jcore

    for eqn in jaxpr.eqns:
        label = f"{prefix}/{_eqn_label(eqn)}" if prefix else _eqn_label(eqn)
        if eqn.primitive.name == "pallas_call":
            yield eqn, label
            continue  # the kernel body holds no further pallas_calls we could launch
        for sub in jcore.jaxprs_in_params(eqn.params):
            yield from _walk(sub, label)
        # custom_vjp keeps its forward as a ClosedJaxpr under 'call_jaxpr'/'fun_jaxpr' (covered above);
        # its bwd is a Python callable, traced only under differentiation.


def remote_dma_census(kernel_jaxpr) -> tuple[int, int]:
    """(count, bytes) of the kernel's DMAs with a device_id: what it sends over ICI.

    Reads jax's private DMA operand layout; anything unreadable counts as no remote DMA.
    """
    from jax._src.core import jaxprs_in_params

    try:
        from jax._src.pallas.mosaic.primitives import _dma_unflatten
    except ImportError:  # pragma: no cover - a jax without it
        return 0, 0
    count = total = 0

    def walk(jaxpr) -> None:
        nonlocal count, total
        for eqn in getattr(jaxpr, "eqns", ()):
            if eqn.primitive.name == "dma_start":
                try:
                    src, _dst, _sem, _src_sem, device_id = _dma_unflatten(
                        eqn.params["tree"], [v.aval for v in eqn.invars]
                    )
                except Exception:  # noqa: BLE001 - private layout changed: count nothing
                    continue
                if device_id is not None:
                    count += 1
                    total += int(math.prod(src.shape)) * np.dtype(src.dtype).itemsize
            for inner in jaxprs_in_params(eqn.params):  # loops, conds, pjit bodies
                walk(inner)

    walk(getattr(kernel_jaxpr, "jaxpr", kernel_jaxpr))
    return count, total


def call_info(eqn) -> PallasCallInfo:
    """One `pallas_call` equation read as its PallasCallInfo (the work census counts a body x its grid)."""
    return _call_info(eqn, "pallas_call")


def find_pallas_calls(closed_jaxpr: Any) -> list[PallasCallInfo]:
    """Every `pallas_call` in a traced program, in program order (empty for plain jnp).

    Accepts a ClosedJaxpr (`jax.make_jaxpr(f)(*args)`, `jax.jit(f).trace(*args).jaxpr`), a Jaxpr,
    or a `Traced` stage.
    """
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # Traced.jaxpr is a ClosedJaxpr
    return [_call_info(eqn, path) for eqn, path in _walk(jaxpr, "")]
