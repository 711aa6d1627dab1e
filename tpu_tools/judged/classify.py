"""Turn a compiler/runtime exception into a Failure with a one-line cause a person or model can act on."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
from maxkernel.tpu_tools.reports import Failure

_ALLOC = re.compile(r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\)")
# Mosaic's scoped-VMEM check, e.g. "Scoped allocation with size 33.82M and limit 32.00M exceeded ..."
_SCOPED = re.compile(r"Scoped allocation with size ([\d.]+)([KMG]?)i?B? and limit ([\d.]+)([KMG]?)i?B?")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}  # XLA prints byte sizes in binary units
_REMOVED = re.compile(r"module '(jax[\w.]*)' has no attribute '(\w+)'")
_BLOCK_RULE = "divisible by 8 and 128"


def _candidate_line(exc: BaseException, path: Path | None) -> int | None:
    """The candidate's line: from the traceback, else from 'at <file>:<line>' in lowering messages."""
    if path is None:
        return None
    line = None
    mentioned = re.findall(re.escape(path.name) + r":(\d+)", str(exc))
    if mentioned:
        line = int(mentioned[-1])
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            if Path(frame.filename).resolve() == path:
                line = frame.lineno
        except OSError:
            continue
    return line


def _first_line(text: str, limit: int = 300) -> str:
    for raw in text.strip().splitlines():
        line = raw.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _cause(text: str) -> str:
    """The error's one line: for an error raised in a host callback (XLA's "CpuCallback error: Traceback
    (most recent call last): ..."), the innermost real error and where, not the traceback's header."""
    from maxkernel.tpu_tools.judged.interpreter_limits import callback_error

    parsed = callback_error(text)
    if parsed is None:
        return _first_line(text)
    frames, error = parsed
    head = _first_line(text.split("Traceback (most recent call last):", 1)[0]).rstrip(": ")
    where = f" at {Path(frames[-1][0]).name}:{frames[-1][1]} in {frames[-1][2]}" if frames else ""
    return _first_line(
        f"{error} (in a host callback{where}; {head})" if head else f"{error} (in a host callback{where})"
    )


_SC_OP = re.compile(r'"(tpu\.[\w.]+)"\(.*?sc_(?:vector|scalar)_subcore', re.S)
_SC_LOC = re.compile(r"\[(\w+)\]")


def _sparse_core_limit(text: str) -> str:
    """Where the compiler refused an op of a SparseCore kernel (memory on a SparseCore subcore): the limit
    named, since no kernel edit makes this libtpu compile what it does not support for that chip."""
    m = _SC_OP.search(text)
    if m is None:
        return ""
    import jax

    where = text.split("Suspected Python Code Location:", 1)[-1]
    fn = _SC_LOC.search(where)
    return (
        f" (a SparseCore kernel{' ' + fn.group(1) if fn else ''}: the installed libtpu's compiler, jax "
        f"{jax.__version__}, does not support its op {m.group(1)} for this chip; SparseCore kernels compile "
        "off the chip only where this libtpu supports their ops, so this one has no compile, estimate or "
        "validation for this target here)"
    )


_BLOCK_SPEC = re.compile(
    r"Block spec for (?P<arg>.+?) in pallas_call (?P<kernel>\S+) .*?has block shape \((?P<block>.*?)\), "
    r"array shape \((?P<array>.*?)\)",
    re.S,
)


def _block_rule_detail(message: str) -> str:
    """'block (100, 128) for args[0] of _kernel on array (256, 512)' from Pallas's long block-spec error."""
    m = _BLOCK_SPEC.search(message)
    if not m:
        return _first_line(message)
    block = re.sub(r"Blocked\(block_size=(\w+)\)", r"\1", m["block"])
    return (
        f"block ({block}) for {m['arg']} of {m['kernel']} on array ({m['array']}); the last two block dims "
        "must be divisible by 8 and 128 or equal the array's"
    )


def _vmem_numbers(text: str) -> tuple[int | None, int | None, str]:
    """(requested, limit, 'scoped' | 'memory' | '') from the compiler's VMEM message."""
    if m := _ALLOC.search(text):
        return int(m.group(1)), int(m.group(2)), "memory"
    if m := _SCOPED.search(text):
        return (
            round(float(m.group(1)) * _UNITS[m.group(2)]),
            round(float(m.group(3)) * _UNITS[m.group(4)]),
            "scoped",
        )
    return None, None, ""


def _vmem_advice(req: int | None, limit: int | None, which: str, physical: int | None) -> str:
    """Raise the scoped limit where the chip's physical VMEM holds the request; else shrink."""
    shrink = "use smaller blocks or fewer buffers"
    if which == "scoped" and req and physical and req <= physical * 0.9:
        want = min(physical, -(-int(req * 1.1) // (1 << 20)) * (1 << 20))
        return (
            f"; the chip has {physical / (1 << 20):.0f} MiB physical VMEM: raise the scoped limit with "
            f"compiler_params=pltpu.CompilerParams(vmem_limit_bytes={want}), or {shrink}"
        )
    return f"; {shrink}"


def classify_exception(
    exc: BaseException,
    stage: str,
    candidate_path: Path | None = None,
    *,
    physical_vmem_bytes: int | None = None,
) -> Failure:
    """Map an exception raised while tracing/lowering/compiling/running the candidate to a Failure.

    `physical_vmem_bytes` (the target chip's) lets a scoped-VMEM overshoot suggest `vmem_limit_bytes`."""
    text = f"{type(exc).__name__}: {exc}"
    full = "".join(traceback.format_exception(exc))
    line = _candidate_line(exc, candidate_path)
    where = f" (candidate line {line})" if line else ""
    lowered = text.lower()

    req, cap, which = _vmem_numbers(text)
    for space in ("vmem", "smem"):
        if ("resource_exhausted" in lowered and space in lowered) or (space == "vmem" and which == "scoped"):
            limit = "scoped limit" if which == "scoped" else "capacity"
            nums = f": asked {req:,} bytes of {space.upper()}, {limit} {cap:,}" if req else ""
            advice = _vmem_advice(req, cap, which, physical_vmem_bytes) if space == "vmem" else ""
            return Failure(
                kind=f"{space}_exhausted",  # type: ignore[arg-type]
                summary=f"{space.upper()} exhausted{nums}{advice}{where}",
                message=full,
                stage=stage,
                line=line,
                requested_bytes=req,
                capacity_bytes=cap,
            )
    if type(exc).__name__ == "VerificationError" or "internal verification error" in lowered:
        # Mosaic's MLIR verifier refused the IR the kernel lowered to (jax words it as its own bug and
        # asks for a report; the cause is the kernel's op, e.g. a float tpu.iota), at the kernel's line
        detail = _first_line(str(exc).split("Error details:", 1)[-1])
        return Failure(
            kind="lowering_error",
            summary=f"Mosaic's verifier rejected the kernel's lowering: {detail}{where}",
            message=full,
            stage=stage,
            line=line,
        )
    if "mosaic failed to compile" in lowered or type(exc).__name__ == "MosaicError":
        detail = _first_line(str(exc).split("Mosaic failed to compile TPU kernel:", 1)[-1])
        return Failure(
            kind="mosaic_error",
            summary=f"Mosaic rejected the kernel: {detail}{where}",
            message=full,
            stage=stage,
            line=line,
        )
    if _BLOCK_RULE in text or "block shape" in lowered and "pallas tpu lowering" in lowered:
        return Failure(
            kind="lowering_error",
            summary=f"block shape breaks the (8,128) tiling rule: {_block_rule_detail(str(exc))}{where}",
            message=full,
            stage=stage,
            line=line,
        )
    if (
        "unimplemented primitive" in lowered
        or "pallas tpu lowering" in lowered
        or "lowering" in lowered
        and isinstance(exc, NotImplementedError)
    ):
        return Failure(
            kind="lowering_error",
            summary=f"Pallas TPU lowering failed: {_first_line(str(exc))}{where}",
            message=full,
            stage=stage,
            line=line,
        )
    if isinstance(exc, MemoryError) or "resource_exhausted" in lowered and "out of memory" in lowered:
        return Failure(
            kind="oom",
            summary=f"host memory exhausted: {_first_line(text)}",
            message=full,
            stage=stage,
            line=line,
        )
    if isinstance(exc, AttributeError) and (m := _REMOVED.search(str(exc))):
        import jax

        return Failure(
            kind="python_error",
            summary=(
                f"{m.group(1)}.{m.group(2)} does not exist in the installed jax {jax.__version__}: removed or "
                f"renamed since the kernel was written; find the current spelling in jax's own Pallas ops "
                f"(`maxkernel examples`){where}"
            ),
            message=full,
            stage=stage,
            line=line,
        )
    if stage == "compile":
        return Failure(
            kind="compile_error",
            summary=f"compiler error: {_cause(text)}{_sparse_core_limit(text)}{where}",
            message=full,
            stage=stage,
            line=line,
        )
    if stage == "run":
        return Failure(
            kind="runtime_error",
            summary=f"kernel failed while running: {_cause(text)}{where}",
            message=full,
            stage=stage,
            line=line,
        )
    return Failure(
        kind="python_error", summary=f"{_cause(text)}{where}", message=full, stage=stage, line=line
    )


def unpartitioned_failure(n: int, mesh_text: str) -> Failure:
    """Pallas calls outside any shard_map over a mesh: the real compiler cannot partition them.

    Said from the traced jaxpr, before lowering (where Mosaic raises a bare NotImplementedError) and
    before anything runs (the interpreter may abort on them instead)."""
    return Failure(
        kind="compile_error",
        summary=f"{n} pallas_call(s) outside any shard_map over the {mesh_text} "
        "mesh: Mosaic kernels cannot be automatically partitioned (wrap the kernel in "
        "jax.shard_map; remote DMAs move data between devices)",
        stage="trace",
    )


def load_failure(e: UsageError | CandidateLoadError) -> Failure:
    """The caller's mistake (usage_error) or a candidate that broke on import (load_error)."""
    if isinstance(e, CandidateLoadError):
        return Failure(kind="load_error", summary=str(e), message=e.detail, stage="load", line=e.line)
    return Failure(kind="usage_error", summary=str(e), stage="load")
