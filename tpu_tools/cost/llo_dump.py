"""Compile for a TPU target with libtpu's LLO text dump switched on, and read back what it wrote.

libtpu reads `LIBTPU_INIT_ARGS` once, when the TPU backend first initialises in a process, so the
dump can only be switched on in a process that has not touched the TPU backend yet: a pool child
(every pool job is a fresh fork whose parent never initialised a backend). `enable_dump` sets the
flags and refuses (returns None) when the backend is already up without them. The flags are internal
to libtpu 0.0.42 (pinned): callers treat a missing or unreadable dump as "no LLO" and fall back.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO, parse_dump_dir

__all__ = [
    "DUMP_FLAG",
    "active_dump",
    "compile_with_dump",
    "dump_flags",
    "enable_dump",
    "enable_dump_for",
    "scoped_vmem_error",
]

DUMP_FLAG = "--xla_jf_dump_to="
# `final` keeps only the final passes (~300 KB per kernel instead of tens of MB).
_OTHER_FLAGS = "--xla_jf_dump_llo_text=true --xla_jf_dump_llo_pass_label_regex=final"


def dump_flags(dump_dir: str | Path) -> str:
    return f"{DUMP_FLAG}{dump_dir} {_OTHER_FLAGS}"


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # private API moved: assume the worst only if jax says a backend exists
        return False


def active_dump() -> Path | None:
    """The folder this process's compiles dump to, if a job switched the dump on before its backend
    started; None otherwise (never switched on here: it would stay on for every later compile)."""
    m = re.search(re.escape(DUMP_FLAG) + r"(\S+)", os.environ.get("LIBTPU_INIT_ARGS", ""))
    return Path(m.group(1)) if m else None


def enable_dump(dump_dir: str | Path | None = None) -> Path | None:
    """Switch the dump on for this process; the folder it writes to, or None if it is too late."""
    on = active_dump()
    if on is not None:
        return on
    if _backend_started():
        return None
    root = Path(dump_dir) if dump_dir is not None else Path(tempfile.mkdtemp(prefix="maxkernel-llo-"))
    root.mkdir(parents=True, exist_ok=True)
    current = os.environ.get("LIBTPU_INIT_ARGS", "")
    os.environ["LIBTPU_INIT_ARGS"] = (current + " " + dump_flags(root)).strip()
    return root


def enable_dump_for(target: str) -> None:
    """`enable_dump` in a pool job whose static estimate is for a TPU target (the job's first act, before its
    backend starts): its compiles are then costed from their own schedule (tier llo). A target that does not
    parse is left to the job to report."""
    from maxkernel.tpu_tools.hardware.targets import parse_target

    try:
        tpu = parse_target(target).kind == "tpu"
    except Exception:  # noqa: BLE001 - the job itself says what is wrong with it
        return
    if tpu:
        enable_dump()


def compile_with_dump(
    fn: Callable, args: Sequence[Any], dump_root: Path | None, traced: Any = None
) -> tuple[Any, list[ProgramLLO], dict[str, float]]:
    """jit(fn).trace(*args).lower().compile(), then the programs that compile added to `dump_root`.

    `traced` (that jit(fn).trace(*args), when the caller already has it) is lowered as is: tracing a
    production kernel is seconds, and an estimate traces it once. Returns (compiled, programs,
    times_ms). Compile errors propagate; a missing dump gives [].
    """
    import jax

    before = {p.name for p in dump_root.iterdir()} if dump_root and dump_root.is_dir() else set()
    t0 = time.perf_counter()
    compiled = (traced if traced is not None else jax.jit(fn).trace(*args)).lower().compile()
    t1 = time.perf_counter()
    programs: list[ProgramLLO] = []
    if dump_root is not None and dump_root.is_dir():
        new = {p.name for p in dump_root.iterdir()} - before
        programs = parse_dump_dir(dump_root, only=new)
    t2 = time.perf_counter()
    return compiled, programs, {"compile_ms": (t1 - t0) * 1e3, "parse_ms": (t2 - t1) * 1e3}


_SCOPED = re.compile(
    r"[Ss]coped allocation with size\s*([\d.]+)\s*([KMG]?)i?B?\s*and limit\s*([\d.]+)\s*([KMG]?)i?B?"
)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


# One allocation bigger than the memory space: "Allocation (size=268435456) would exceed memory (size=134217728)
# :: #allocation2 [... space=vmem ...]" (a lower bound on the need: that allocation alone).
_WHOLE = re.compile(r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\)[^\n]*space=vmem")


def scoped_vmem_error(message: str) -> tuple[int, int] | None:
    """(bytes needed, limit) from Mosaic's VMEM errors: over the scoped limit, or over physical VMEM."""
    whole = _WHOLE.search(message)
    if whole:
        return int(whole.group(1)), int(whole.group(2))
    m = _SCOPED.search(message)
    if not m:
        return None
    need = float(m.group(1)) * _UNITS[m.group(2)]
    limit = float(m.group(3)) * _UNITS[m.group(4)]
    return int(need), int(limit)
