"""The largest value a kernel body builds: one bigger than the chip's whole VMEM can never compile.

Mosaic keeps every vector value of a kernel body in vregs, spilling to VMEM; it never streams a value
through HBM. A body that builds a value larger than the chip's physical VMEM (15p's decay matrix,
f32[16, 4096, 4096] = 1 GiB, at its production size) cannot be compiled, yet Mosaic works on it for over
five minutes (measured on tpu-v6e) before a verdict, and a search or a suite waits out its timeout once
per attempt. Read from the traced jaxpr before the compile, the same verdict takes milliseconds.

Only values that something uses count (the compiler drops the rest), and only their raw bytes (Mosaic's
(8, 128) tiling pads them further), so a value this check names could never fit: the check is a lower
bound on the compiler's need, never a guess above it.

A second limit is the compiler's time, not memory: Mosaic unrolls every vector op over the (8, 128) vreg
tiles of its value's last two dims, so a value with small trailing dims costs a tile per element
(26k's epilogue reshaped f32[64, 8192] to [64, 8192, 1, 1]: 524 288 tiles for 2 MiB of data, and its
compile ran past the 300 s timeout). Measured here (tpu-v6e, an [8, n, 1, 1] f32 value reduced over its
unit dims): 2.6 s at 1 024 tiles, 6.4 s at 4 096, 26.5 s at 16 384, linear. `MAX_VALUE_TILES` refuses a
body whose one value spans more than 4x the largest measured (about two minutes of compile): a dense
value that large is 256 MiB of f32, already over every chip's VMEM, so only a wasteful layout meets it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "MAX_VALUE_TILES",
    "KernelValue",
    "Refusal",
    "largest_kernel_value",
    "refusal",
    "value_over_tile_budget",
    "value_over_vmem",
]

MAX_VALUE_TILES = 65536
LANES, SUBLANES, WORD_BYTES = 128, 8, 4


class KernelValue(BaseModel):
    """One value of a kernel body: what builds it, its type, its bytes and the line that wrote it."""

    kernel: str = Field(description="the pallas_call's kernel name")
    primitive: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    tiles: int = Field(description="(8, 128) vreg tiles of its last two dims (packed dtypes hold more rows)")
    file: str | None = None
    line: int | None = None

    def describe(self) -> str:
        where = f" at {self.file}:{self.line}" if self.file and self.line else ""
        return f"{self.dtype}{list(self.shape)} ({_human(self.nbytes)}) from {self.primitive}{where} in {self.kernel}"


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def _value_bytes(aval: Any) -> int | None:
    """Raw bytes of an array value; None for refs, tokens and scalars' absence of a shape."""
    if hasattr(aval, "inner_aval"):  # a Ref: memory the pipeline or the scratch owns, not a value
        return None
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        return int(math.prod(shape)) * int(dtype.itemsize)
    except (TypeError, AttributeError):
        return None


def _tiles(shape: tuple[int, ...], itemsize: int) -> int:
    """The vreg tiles Mosaic lays the value out in: last dim over 128 lanes, the one before over the sublanes."""
    if not shape:
        return 1
    rows = SUBLANES * max(1, WORD_BYTES // max(1, itemsize))
    if len(shape) == 1:  # one row of lanes; counted at its densest, so never above Mosaic's count
        return max(1, math.ceil(shape[0] / (LANES * rows)))
    *lead, a, b = shape
    return int(math.prod(lead)) * math.ceil(a / rows) * math.ceil(b / LANES)


def _live_eqns(jaxpr) -> list:
    """The equations whose results are used (or that have effects: ref writes, DMAs), in program order."""
    live_vars = {id(v) for v in jaxpr.outvars}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(id(v) in live_vars for v in eqn.outvars):
            kept.append(eqn)
            live_vars.update(id(v) for v in eqn.invars)
    return kept[::-1]


def _source(eqn) -> tuple[str | None, int | None]:
    try:
        from jax._src import source_info_util

        frame = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:  # noqa: BLE001 - private API: the line is a courtesy
        return None, None
    if frame is None:
        return None, None
    return frame.file_name, frame.start_line


def _values(jaxpr):
    """Every live value of a body and its sub-bodies, as (bytes, tiles, equation, var)."""
    from jax._src import core as jcore

    for eqn in _live_eqns(jaxpr):
        for v in eqn.outvars:
            nbytes = _value_bytes(v.aval)
            if nbytes is not None:
                yield nbytes, _tiles(tuple(v.aval.shape), v.aval.dtype.itemsize), eqn, v
        for sub in jcore.jaxprs_in_params(eqn.params):  # loop and cond bodies, nested jit
            yield from _values(sub)


def _value(kernel: str, nbytes: int, tiles: int, eqn, v) -> KernelValue:
    file, line = _source(eqn)
    return KernelValue(
        kernel=kernel,
        primitive=eqn.primitive.name,
        shape=tuple(int(d) for d in v.aval.shape),
        dtype=str(v.aval.dtype),
        nbytes=nbytes,
        tiles=tiles,
        file=file,
        line=line,
    )


def _largest(traced_jaxpr: Any) -> tuple[KernelValue | None, KernelValue | None]:
    """(the largest live value by bytes, the largest by vreg tiles) over every kernel body, in one walk."""
    from maxkernel.tpu_tools.problem.pallas_info import _kernel_name_and_source, _walk

    jaxpr = getattr(traced_jaxpr, "jaxpr", traced_jaxpr)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    best: list[KernelValue | None] = [None, None]
    keys = [-1, -1]
    for eqn, _label in _walk(jaxpr, ""):
        body = eqn.params.get("jaxpr")
        if body is None:
            continue
        name = _kernel_name_and_source(eqn.params)[0]
        for nbytes, tiles, e, v in _values(getattr(body, "jaxpr", body)):
            for i, key in enumerate((nbytes, tiles)):
                if key > keys[i]:  # the first of equal size: the earliest line
                    best[i], keys[i] = _value(name, nbytes, tiles, e, v), key
    return best[0], best[1]


def largest_kernel_value(traced_jaxpr: Any, by: str = "bytes") -> KernelValue | None:
    """The largest live value (by `bytes` or vreg `tiles`) of any pallas_call kernel body (None if none)."""
    by_bytes, by_tiles = _largest(traced_jaxpr)
    return by_bytes if by == "bytes" else by_tiles


def _largest_or_none(traced_jaxpr: Any) -> tuple[KernelValue | None, KernelValue | None]:
    try:
        return _largest(traced_jaxpr)
    except Exception:  # noqa: BLE001 - private jaxpr internals moved: the compiler decides
        return None, None


def value_over_vmem(traced_jaxpr: Any, vmem_bytes: int | None) -> KernelValue | None:
    """The kernel-body value larger than `vmem_bytes` (the chip's physical VMEM), None when all fit.

    Never raises: a jaxpr this walk cannot read leaves the verdict to the compiler.
    """
    found = _largest_or_none(traced_jaxpr)[0] if vmem_bytes else None
    return found if found is not None and found.nbytes > vmem_bytes else None


class Refusal(BaseModel):
    """Why a kernel is not compiled: the value, the failure kind and the one line that says so."""

    kind: Literal["vmem_exhausted", "compile_error"]
    message: str
    value: KernelValue
    capacity_bytes: int | None = Field(None, description="the chip's physical VMEM, for vmem_exhausted")


def refusal(traced_jaxpr: Any, vmem_bytes: int | None, chip: str) -> Refusal | None:
    """The pre-compile verdict every compile path shares (one walk of the kernel bodies): a value over the
    chip's physical VMEM first, else one over the tile budget; None when the compiler should decide."""
    by_bytes, by_tiles = _largest_or_none(traced_jaxpr)
    if vmem_bytes and by_bytes is not None and by_bytes.nbytes > vmem_bytes:
        return Refusal(
            kind="vmem_exhausted",
            message=over_vmem_message(by_bytes, vmem_bytes, chip),
            value=by_bytes,
            capacity_bytes=vmem_bytes,
        )
    if by_tiles is not None and by_tiles.tiles > MAX_VALUE_TILES:
        return Refusal(kind="compile_error", message=over_tiles_message(by_tiles), value=by_tiles)
    return None


def over_vmem_message(value: KernelValue, vmem_bytes: int, chip: str) -> str:
    """One line: which value, how big, against which memory, and that no compile was attempted."""
    return (
        f"a kernel body value is {value.describe()}, more than all {_human(vmem_bytes)} of {chip}'s VMEM: "
        "no block size or vmem_limit_bytes can hold it (checked on the traced kernel before the Mosaic "
        "compile, which works for minutes on a body this size); compute it in tiles that fit"
    )


def value_over_tile_budget(traced_jaxpr: Any, budget: int = MAX_VALUE_TILES) -> KernelValue | None:
    """The kernel-body value spanning more vreg tiles than `budget`, None when all are within it."""
    found = _largest_or_none(traced_jaxpr)[1]
    return found if found is not None and found.tiles > budget else None


def over_tiles_message(value: KernelValue, budget: int = MAX_VALUE_TILES) -> str:
    """One line: which value, how many tiles, and why it was not compiled."""
    return (
        f"a kernel body value is {value.describe()}: {value.tiles} (8, 128) vreg tiles of its last two dims, "
        f"over the {budget}-tile compile budget (Mosaic unrolls every op per tile: about 26 s per 16 384 tiles "
        "measured, so minutes here); not compiled. Keep the last two dims large (no trailing unit dims) or "
        "compute it in smaller blocks"
    )
