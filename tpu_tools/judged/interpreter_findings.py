"""What jax's TPU interpreter found wrong with the kernel (judged side): a finding, not a limit.

Some of what the interpreter raises is a check it makes on the kernel, for faults the chip does not
report: an output block revisited after the grid left it (on a TPU the block went back to HBM when the
index moved, and the later visit starts from a fresh VMEM buffer: the earlier write is lost), an
out-of-bounds block index (a scalar-prefetched index, an index map that runs off the array), an
out-of-bounds read or write of a buffer (a DMA's source slice, a dynamic `pl.ds`). Those are negative
verdicts, said in one sentence built from the interpreter's own numbers (which block, which output,
which grid steps); the traceback stays in the Failure's `message`. Everything else the interpreter
raises stays `interpret_unsupported` (interpreter_limits.py).

The interpreter's messages are jax 0.10.2's text: parsed defensively, and a message that no longer
parses still gives the kind and the interpreter's own line.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from maxkernel.tpu_tools.judged.interpreter_limits import InterpreterFailure

# the interpreter's own modules: only a check raised there is one of its findings
_INTERPRETER = "jax._src.pallas.mosaic.interpret."
_SLICE = re.compile(r"slice\(\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(?:-?\d+|None)\s*\)|(-?\d+)")
_REVISITED = re.compile(
    r"Revisited block \((?P<block>.*?)\) of output (?P<out>\d+) in iteration \((?P<step>[^)]*)\)\."
    r"(?:.*?previously visited in iterations \((?P<first>[^)]*)\) through \((?P<last>[^)]*)\))?"
)
_OOB_BLOCK = re.compile(
    r"Out-of-bounds block index \((?P<index>[^)]*)\) for (?P<side>input|output) \"(?P<name>[^\"]*)\" in "
    r"iteration \((?P<step>[^)]*)\)(?:.*?\[(?P<range>.*)\] but \w+ has shape \((?P<shape>[^)]*)\))?"
)
_OOB_ACCESS = re.compile(
    r"Out-of-bounds (?P<op>masked swap|read|write|swap) of \(\d+ \d+ (?P<space>\w+) \d+\):"
    r"(?:.*?\[(?P<range>.*)\] but buffer has shape \((?P<shape>[^)]*)\))?"
)
_OOB_ANY = re.compile(r"out[- ]of[- ]bounds?", re.I)

FindingKind = Literal["revisited_output_block", "out_of_bounds"]


class KernelFinding(BaseModel):
    """A fault of the kernel's that the interpreter caught, in one sentence."""

    kind: FindingKind
    summary: str


def _ranges(text: str) -> list[tuple[int, int] | int] | None:
    """`(slice(128, 256, 1), slice(0, 128, 1))` -> [(128, 256), (0, 128)]; an int entry stays an int."""
    out: list[tuple[int, int] | int] = []
    for m in _SLICE.finditer(text):
        out.append((int(m[1]), int(m[2])) if m[1] is not None else int(m[3]))
    return out or None


def _span(ranges: list[tuple[int, int] | int]) -> str:
    return "[" + ", ".join(f"{r[0]}:{r[1]}" if isinstance(r, tuple) else str(r) for r in ranges) + "]"


def _block_index(ranges: list[tuple[int, int] | int]) -> str | None:
    """The block index of a range of whole blocks ((128, 256) of 128-wide blocks is 1), else None."""
    idx = []
    for r in ranges:
        if not isinstance(r, tuple):
            continue
        width = r[1] - r[0]
        if width <= 0 or r[0] % width:
            return None
        idx.append(str(r[0] // width))
    return f"({', '.join(idx)})" if idx else None


def _step(text: str | None) -> str:
    return f"({text.strip()})" if text is not None else "(?)"


def _kernel_of(calls: list, output: int, step_rank: int, ranges: list | None) -> str:
    """' of kernel NAME (file:line)' where exactly one pallas_call fits (grid rank, output block shape)."""
    fits = []
    for c in calls:
        if len(c.grid) != step_rank or output >= len(c.outputs):
            continue
        shape = tuple(b for b in c.outputs[output].block_shape if b is not None)
        widths = tuple(r[1] - r[0] for r in ranges or () if isinstance(r, tuple))
        if ranges is None or shape == widths:
            fits.append(c)
    if len(fits) != 1:
        return ""
    c = fits[0]
    grid = ", ".join("?" if g is None else str(g) for g in c.grid)
    where = f", {c.source.replace(chr(92), '/').rsplit('/', 1)[-1]}" if c.source else ""  # file:line
    return f" of kernel {c.kernel_name} (grid ({grid}){where})"


def _revisited(m: re.Match, calls: list) -> KernelFinding:
    ranges = _ranges(m["block"])
    step = m["step"]
    where = _span(ranges) if ranges else f"({m['block']})"
    index = _block_index(ranges) if ranges else None
    kernel = _kernel_of(calls, int(m["out"]), len([s for s in step.split(",") if s.strip()]), ranges)
    before = (
        f" after the grid left it at step {_step(m['last'])} (first visited at step {_step(m['first'])})"
        if m["last"] is not None
        else " after the grid left it"
    )
    return KernelFinding(
        kind="revisited_output_block",
        summary=(
            f"output {m['out']}{kernel} writes block {where}"
            f"{f' (block index {index})' if index else ''} again at grid step ({step}){before}: on a TPU "
            "an output block goes back to HBM when its index changes and a later visit starts from a fresh "
            "VMEM buffer, so the earlier write is lost; visit each output block in consecutive steps (check "
            "the output index map for a clamp or modulo, and keep the reduction axis last)"
        ),
    )


def _oob_block(m: re.Match) -> KernelFinding:
    ranges = _ranges(m["range"] or "")
    side, name = m["side"], m["name"]
    span = f": block {_span(ranges)} of an array of shape ({m['shape']})" if ranges and m["shape"] else ""
    return KernelFinding(
        kind="out_of_bounds",
        summary=(
            f"{side} {name!r} is given block index ({m['index']}) at grid step ({m['step']}), outside the "
            f"{side}{span}: on a TPU that block's DMA {'reads' if side == 'input' else 'writes'} memory past "
            f"the array; check the {side}'s index map (and any scalar-prefetched indices it reads)"
        ),
    )


def _oob_access(m: re.Match) -> KernelFinding:
    ranges = _ranges(m["range"] or "")
    op, space = m["op"], m["space"].upper()
    span = f" {_span(ranges)}" if ranges else ""
    shape = f" of shape ({m['shape']})" if m["shape"] else ""
    dma = " (a DMA's source or destination slice)" if space in ("HBM", "ANY") else ""
    return KernelFinding(
        kind="out_of_bounds",
        summary=(
            f"the kernel's {op} of{span} runs past a {space} buffer{shape}{dma}: on a TPU nothing checks "
            "the bounds and it touches other memory; check the dynamic indices (pl.ds starts, DMA slices)"
        ),
    )


def kernel_finding(
    found: InterpreterFailure, calls: list | None = None, text: str = ""
) -> KernelFinding | None:
    """The kernel's fault the interpreter raised, or None where what it raised is its own limit.

    `found`: an interpreter failure that was not vetoed (jax's own frames raised it, with no candidate
    code in between); `calls`: the program's pallas_calls (pallas_info.find_pallas_calls), to name the
    kernel where one fits; `text`: the whole exception, read where the error's own line is a wrapper
    (a megacore thread's failure re-raised as "Computation failed on device ...")."""
    if found.vetoed or not found.function.startswith(_INTERPRETER):
        return None
    for source in (found.error, text):
        if m := _REVISITED.search(source):
            return _revisited(m, calls or [])
        if m := _OOB_BLOCK.search(source):
            return _oob_block(m)
        if m := _OOB_ACCESS.search(source):
            return _oob_access(m)
    text = found.error
    if "Revisited block" in text:  # jax reworded it: the kind, and its own line
        return KernelFinding(kind="revisited_output_block", summary=f"an output block was revisited: {text}")
    if _OOB_ANY.search(text) and found.function.rsplit(".", 1)[-1] in ("get", "store", "swap"):
        return KernelFinding(kind="out_of_bounds", summary=f"an access ran out of bounds: {text}")
    return None
