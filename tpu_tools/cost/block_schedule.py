"""Which Pallas blocks move between HBM and VMEM at each grid step, and how many bytes they occupy.

The data side of the static estimate: VMEM tile padding per dtype, block byte counts, and the schedule
of re-fetches and write-backs obtained by evaluating each BlockSpec's index map over the grid (closed
form for affine maps, enumeration otherwise). `estimate.py` turns this into time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from maxkernel.tpu_tools.problem.pallas_info import (  # bounded_grid: the estimate and census share it
    BlockInfo,
    IndexMap,
    PallasCallInfo,
    UnknownIndexError,
    bounded_grid,
    index_maps,
)

# VMEM tiles are (sublanes, 128 lanes) of 32-bit words; narrower dtypes pack along sublanes:
# (8,128) for 32-bit, (16,128) for 16-bit, (32,128) for 8-bit (Pallas TPU "details" guide).
LANES = 128

# Above this many grid steps, non-affine index maps are evaluated on the first MAX_ENUMERATED_STEPS
# steps only and the rest extrapolated (affine maps are handled in closed form at any size).
MAX_ENUMERATED_STEPS = 1 << 16

# ---------------------------------------------------------------------------------------------------
# Tiles, bytes, VMEM


def itemsize(dtype: str) -> int:
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return 4


def _sublane_tile(itemsize: int) -> int:
    return 8 * max(1, 4 // itemsize) if itemsize <= 4 else 8


def padded_bytes(shape: Sequence[int], itemsize: int) -> int:
    """Bytes of `shape` laid out in (sublane, 128) VMEM tiles."""
    dims = [int(s) for s in shape]
    if not dims:
        return _sublane_tile(itemsize) * LANES * itemsize  # a scalar still occupies one tile
    if len(dims) == 1:
        return round_up(dims[0], LANES) * itemsize  # assumption: 1-D is lane-padded only
    sub = _sublane_tile(itemsize)
    lead = math.prod(dims[:-2])
    return lead * round_up(dims[-2], sub) * round_up(dims[-1], LANES) * itemsize


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def kernel_block_shape(b: BlockInfo) -> list[int]:
    return [s for s in b.block_shape if s is not None]


def block_padded_bytes(b: BlockInfo) -> int:
    return padded_bytes(kernel_block_shape(b), itemsize(b.dtype))


def array_bytes(b: BlockInfo) -> int:
    return math.prod(b.array_shape) * itemsize(b.dtype)


# ---------------------------------------------------------------------------------------------------
# Which blocks move at which step


def _affine_deps(imap: IndexMap, grid: tuple[int, ...]) -> set[int] | None:
    """Grid dims the block index depends on, if the map is affine in the grid indices; else None."""
    r = len(grid)
    pts = [np.zeros(r, np.int64)]
    for d in range(r):
        e = np.zeros(r, np.int64)
        e[d] = 1 if grid[d] > 1 else 0
        pts.append(e)
    # Verification points: the last step, 2*e_d, and a few fixed pseudo-random steps.
    rng = np.random.default_rng(0)
    top = [max(g, 1) for g in grid]  # an empty grid axis (0 steps, a dynamic extent at 0) has only index 0
    checks = [np.array([g - 1 for g in top], np.int64)]
    checks += [np.array([min(2, g - 1) if i == d else 0 for i, g in enumerate(top)]) for d in range(r)]
    checks += [np.array([rng.integers(0, g) for g in top], np.int64) for _ in range(4)]
    vals = imap.evaluate(np.array(pts + checks).reshape(-1, r))
    base = vals[0]
    coef = vals[1 : r + 1] - base  # (r, nout)
    for p, v in zip(checks, vals[r + 1 :], strict=True):
        if not np.array_equal(base + p @ coef, v):
            return None
    return {d for d in range(r) if grid[d] > 1 and np.any(coef[d] != 0)}


def _outer_change_dim(grid: tuple[int, ...], steps: int) -> np.ndarray:
    """For transitions t -> t+1 (t < steps-1): the outermost grid dim that changes (row-major order)."""
    t = np.arange(1, steps, dtype=np.int64)
    out = np.full(t.shape, len(grid) - 1, dtype=np.int64)
    stride = 1
    for d in range(len(grid) - 1, -1, -1):
        # dim d changes at t iff t is a multiple of the product of the inner sizes
        out = np.where(t % stride == 0, d, out)
        stride *= grid[d]
    return out


class BlockSchedule(BaseModel):
    """Transition classes: `count` transitions that each move `overlapped` + `exposed` padded bytes.

    `exposed` bytes belong to single-buffered blocks (pl.Buffered(1)): with one buffer the next block
    cannot be fetched while the current one is in use, so that transfer is serialized with compute.
    """

    classes: list[tuple[int, int, int]]  # (count, overlapped dma bytes, exposed dma bytes)
    moved_per_block: list[int]  # total padded bytes moved per block, incl. first fetch / last writeback
    first_fetch_bytes: int
    last_writeback_bytes: int
    mode: str
    notes: list[str] = Field(default_factory=list)


def block_schedule(call: PallasCallInfo, scalar_prefetch: Sequence[Any] | None) -> BlockSchedule:
    grid, _ = bounded_grid(call)
    steps = math.prod(grid)
    blocks = call.blocks
    maps = index_maps(call)
    pbytes = [block_padded_bytes(b) if b.pipelined else 0 for b in blocks]
    single = [b.pipelined and b.buffer_count == 1 for b in blocks]
    n_in = len(call.inputs)
    first_fetch = sum(pbytes[:n_in])
    last_wb = sum(pbytes[n_in:])
    notes: list[str] = []
    r = len(grid)

    deps: list[set[int] | None] = []
    for b, m in zip(blocks, maps, strict=True):
        if not b.pipelined:
            deps.append(set())
        elif b.uses_scalar_prefetch:
            deps.append(None)
        else:
            deps.append(_affine_deps(m, grid) if r else set())
    need_enum = [i for i, d in enumerate(deps) if d is None]

    if not need_enum:
        # Closed form: a transition whose outermost changing dim is d moves every block whose deepest
        # dependency is at or inside d; there are prod(grid[:d]) * (grid[d] - 1) such transitions.
        deepest = [max(d) if d else -1 for d in deps]  # type: ignore[type-var]
        classes = []
        moved = [pb for pb in pbytes]
        for d in range(r):
            count = math.prod(grid[:d]) * (grid[d] - 1)
            if count <= 0:
                continue
            movers = [i for i in range(len(blocks)) if deepest[i] >= d]
            exposed = sum(pbytes[i] for i in movers if single[i])
            classes.append((count, sum(pbytes[i] for i in movers) - exposed, exposed))
            for i in movers:
                moved[i] += count * pbytes[i]
        return BlockSchedule(
            classes=classes,
            moved_per_block=moved,
            first_fetch_bytes=first_fetch,
            last_writeback_bytes=last_wb,
            mode="affine (closed form)",
            notes=notes,
        )

    # Enumerate (the first MAX_ENUMERATED_STEPS steps) for maps we cannot reduce to a formula.
    n = min(steps, MAX_ENUMERATED_STEPS)
    mode = "enumerated" if n == steps else "sampled"
    pts = np.array(np.unravel_index(np.arange(n), grid)).T if r else np.zeros((n, 0), np.int64)
    changes = np.zeros((len(blocks), max(n - 1, 0)), dtype=bool)
    outer = _outer_change_dim(grid, n) if n > 1 else np.zeros(0, np.int64)
    for i, (d, m) in enumerate(zip(deps, maps, strict=True)):
        if d is not None:
            deepest = max(d) if d else -1
            changes[i] = outer <= deepest
            continue
        try:
            idx = m.evaluate(pts, scalar_prefetch)
            changes[i] = np.any(idx[1:] != idx[:-1], axis=1)
        except UnknownIndexError:
            changes[i] = True  # conservative: a data-dependent block is re-fetched every step
            notes.append(
                f"{blocks[i].role} {blocks[i].position} index depends on scalar prefetch: assumed re-fetched each step"
            )
    moving = changes * np.array(pbytes)[:, None]
    per_t = np.stack(
        [moving[~np.array(single, bool)].sum(axis=0), moving[np.array(single, bool)].sum(axis=0)]
    )
    scale = (steps - 1) / (n - 1) if n > 1 else 0.0
    uniq, counts = np.unique(per_t, axis=1, return_counts=True) if per_t.size else (np.zeros((2, 0)), [])
    classes = [(int(round(c * scale)), int(u[0]), int(u[1])) for u, c in zip(uniq.T, counts, strict=True)]
    moved = [pbytes[i] + int(round(changes[i].sum() * scale)) * pbytes[i] for i in range(len(blocks))]
    if mode == "sampled":
        notes.append(f"index maps evaluated on the first {n} of {steps} steps and extrapolated")
    return BlockSchedule(
        classes=classes,
        moved_per_block=moved,
        first_fetch_bytes=first_fetch,
        last_writeback_bytes=last_wb,
        mode=mode if not any("scalar prefetch" in x for x in notes) else "unknown prefetch",
        notes=notes,
    )
