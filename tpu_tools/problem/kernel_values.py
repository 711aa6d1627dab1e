"""The largest value a kernel body builds: one bigger than the chip's whole VMEM can never compile.

Mosaic keeps every vector value of a kernel body in vregs, spilling to VMEM; it never streams a value
through HBM. A body that builds a value larger than the chip's physical VMEM (15p's decay matrix,
f32[16, 4096, 4096] = 1 GiB, at its production size) cannot be compiled, yet Mosaic works on it for over
five minutes (measured on tpu-v6e) before a verdict, and a search or a suite waits out its timeout once
per attempt. Read from the traced jaxpr before the compile, the same verdict takes milliseconds.

Only values that something uses count (the compiler drops the rest), and only their raw bytes (Mosaic's
(8, 128) tiling pads them further), so a value this check names could never fit: the check is a lower
bound on the compiler's need, never a guess above it.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

__all__ = ["KernelValue", "largest_kernel_value"]


class KernelValue(BaseModel):
    """One value of a kernel body: what builds it, its type, its bytes and the line that wrote it."""

    kernel: str = Field(description="the pallas_call's kernel name")
    primitive: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
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


def _largest_in(jaxpr, kernel: str) -> KernelValue | None:
    from jax._src import core as jcore

    best: KernelValue | None = None
    for eqn in _live_eqns(jaxpr):
        for v in eqn.outvars:
            nbytes = _value_bytes(v.aval)
            if nbytes is not None and (best is None or nbytes > best.nbytes):
                file, line = _source(eqn)
                best = KernelValue(
                    kernel=kernel,
                    primitive=eqn.primitive.name,
                    shape=tuple(int(d) for d in v.aval.shape),
                    dtype=str(v.aval.dtype),
                    nbytes=nbytes,
                    file=file,
                    line=line,
                )
        for sub in jcore.jaxprs_in_params(eqn.params):  # loop and cond bodies, nested jit
            inner = _largest_in(sub, kernel)
            if inner is not None and (best is None or inner.nbytes > best.nbytes):
                best = inner
    return best


def largest_kernel_value(traced_jaxpr: Any) -> KernelValue | None:
    """The largest live value built inside any pallas_call kernel body of a traced program (None if none)."""
    from maxkernel.tpu_tools.problem.pallas_info import _kernel_name_and_source, _walk

    jaxpr = getattr(traced_jaxpr, "jaxpr", traced_jaxpr)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    best: KernelValue | None = None
    for eqn, _label in _walk(jaxpr, ""):
        body = eqn.params.get("jaxpr")
        if body is None:
            continue
        body = getattr(body, "jaxpr", body)
        found = _largest_in(body, _kernel_name_and_source(eqn.params)[0])
        if found is not None and (best is None or found.nbytes > best.nbytes):
            best = found
    return best


def value_over_vmem(traced_jaxpr: Any, vmem_bytes: int | None) -> KernelValue | None:
    """The kernel-body value larger than `vmem_bytes` (the chip's physical VMEM), None when all fit.

    Never raises: a jaxpr this walk cannot read leaves the verdict to the compiler.
    """
    if not vmem_bytes:
        return None
    try:
        found = largest_kernel_value(traced_jaxpr)
    except Exception:  # noqa: BLE001 - private jaxpr internals moved: the compiler decides
        return None
    return found if found is not None and found.nbytes > vmem_bytes else None


def over_vmem_message(value: KernelValue, vmem_bytes: int, chip: str) -> str:
    """One line: which value, how big, against which memory, and that no compile was attempted."""
    return (
        f"a kernel body value is {value.describe()}, more than all {_human(vmem_bytes)} of {chip}'s VMEM: "
        "no block size or vmem_limit_bytes can hold it (checked on the traced kernel before the Mosaic "
        "compile, which works for minutes on a body this size); compute it in tiles that fit"
    )
