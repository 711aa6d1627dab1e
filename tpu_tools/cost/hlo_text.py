"""Read a compiled XLA program's HLO text (`compiled.as_text()`) into computations and instructions.

The text is the one stable view of what XLA emitted for the TPU: which fusions, which operands each
reads, where each buffer lives (`S(1)` in a layout is VMEM), the tile padding (`T(8,128)`), a while
loop's known trip count, and each instruction's jax name stack and source line (metadata). The format
is XLA's and not a public API, so every reader here is defensive: a line it does not understand is
skipped and counted, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

__all__ = ["HloComputation", "HloInstruction", "HloModule", "Shape", "parse_hlo", "parse_shapes"]

_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
             "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 1, "u4": 1,
             "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3b11fnuz": 1, "token": 0}  # fmt: skip
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\](\{[^}]*\})?")
_COMP_HEAD = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
_ATTR_REF = re.compile(r"\b(calls|to_apply|body|condition)=%([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_OPNAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME = re.compile(r"stack_frame_id=(\d+)")
_SRC = re.compile(r'source_file="([^"]*)"\s+source_line=(\d+)')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class Shape:
    """One array shape as XLA laid it out."""

    dtype: str
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...] = ()
    tile: tuple[int, ...] = ()
    memory_space: int = 0  # 1: VMEM on TPU

    @property
    def elements(self) -> int:
        return math.prod(self.dims) if self.dims else 1

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 4)

    @property
    def nbytes(self) -> int:
        """Bytes as laid out: the minor dims padded to the layout's first tile (e.g. (8,128))."""
        dims = list(self.dims)
        if self.tile and dims and self.minor_to_major:
            order = list(self.minor_to_major)
            for t, d in zip(reversed(self.tile), order, strict=False):
                if d < len(dims):
                    dims[d] = -(-dims[d] // t) * t
        return (math.prod(dims) if dims else 1) * self.itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


def parse_shapes(text: str) -> list[Shape]:
    """Every array shape in a type string (a tuple gives several)."""
    out = []
    for dtype, dims, layout in _ARRAY.findall(text):
        if dtype not in _ITEMSIZE:
            continue
        d = tuple(int(x) for x in dims.split(",") if x)
        m2m: tuple[int, ...] = ()
        tile: tuple[int, ...] = ()
        space = 0
        if layout:
            body = layout[1:-1]
            head = body.split(":", 1)
            m2m = tuple(int(x) for x in head[0].split(",") if x.strip().isdigit())
            if len(head) > 1:
                t = re.search(r"T\(([\d,]+)\)", head[1])
                if t:
                    tile = tuple(int(x) for x in t.group(1).split(",") if x)
                s = re.search(r"S\((\d+)\)", head[1])
                if s:
                    space = int(s.group(1))
        out.append(Shape(dtype, d, m2m, tile, space))
    return out


@dataclass
class HloInstruction:
    name: str
    opcode: str
    shapes: list[Shape]
    operands: list[str]
    attrs: str
    is_root: bool = False
    op_name: str | None = None
    source: str | None = None
    calls: list[str] = field(default_factory=list)
    parameter_number: int | None = None
    literal: str | None = None  # a constant's value text, e.g. '10'

    @property
    def fusion_kind(self) -> str | None:
        m = re.search(r"\bkind=(k\w+)", self.attrs)
        return m.group(1) if m else None

    def backend_config(self) -> dict:
        m = re.search(r"backend_config=(\{.*)", self.attrs)
        if not m:
            return {}
        text, depth = m.group(1), 0
        for i, ch in enumerate(text):
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0:
                try:
                    return json.loads(text[: i + 1])
                except ValueError:
                    return {}
        return {}

    def attr(self, key: str) -> str | None:
        m = re.search(rf"\b{re.escape(key)}=([^,\s]+(?:\{{[^}}]*\}})?)", self.attrs)
        return m.group(1) if m else None


@dataclass
class HloComputation:
    name: str
    instructions: list[HloInstruction]
    is_entry: bool = False

    def by_name(self) -> dict[str, HloInstruction]:
        return {i.name: i for i in self.instructions}


@dataclass
class HloModule:
    computations: dict[str, HloComputation]
    entry: str | None
    skipped_lines: int = 0

    @property
    def entry_computation(self) -> HloComputation | None:
        return self.computations.get(self.entry or "")


def _split_type(rest: str) -> tuple[str, str]:
    """('type', 'opcode(...)...') from the text after '= '."""
    rest = rest.lstrip()
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rest[: i + 1], rest[i + 1 :].lstrip()
    parts = rest.split(" ", 1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def _operands(text: str) -> tuple[list[str], str]:
    """Operand names inside the opcode's parentheses, and the attributes after them."""
    start = text.find("(")
    if start < 0:
        return [], text
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] == "("
        depth -= text[i] == ")"
        if depth == 0:
            inner, after = text[start + 1 : i], text[i + 1 :]
            return re.findall(r"%([\w.\-]+)", inner), after
    return re.findall(r"%([\w.\-]+)", text[start:]), ""


def _frames(text: str) -> dict[int, str]:
    """stack_frame_id -> 'file:line' from the module's FileNames/FileLocations/StackFrames tables."""
    files: dict[int, str] = {}
    locs: dict[int, tuple[int, int]] = {}
    frames: dict[int, int] = {}
    section = None
    for line in text.splitlines():
        s = line.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = s
            continue
        if not s or s.startswith("%") or s.startswith("ENTRY") or s.startswith("HloModule"):
            if s.startswith("%") or s.startswith("ENTRY"):
                section = None
            continue
        if section == "FileNames":
            m = re.match(r'(\d+)\s+"(.*)"', s)
            if m:
                files[int(m.group(1))] = m.group(2)
        elif section == "FileLocations":
            m = re.match(r"(\d+)\s+\{file_name_id=(\d+).*?\bline=(\d+)", s)
            if m:
                locs[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        elif section == "StackFrames":
            m = re.match(r"(\d+)\s+\{file_location_id=(\d+)", s)
            if m:
                frames[int(m.group(1))] = int(m.group(2))
    out = {}
    for fid, lid in frames.items():
        if lid in locs and locs[lid][0] in files:
            f, line = files[locs[lid][0]], locs[lid][1]
            out[fid] = f"{f}:{line}"
    return out


def _open_braces(text: str) -> int:
    """How many `{` the text leaves open, braces inside quoted strings not counted."""
    if text.count("{") == text.count("}"):
        return 0
    bare = _STRING.sub("", text)
    return bare.count("{") - bare.count("}")


def _instruction_lines(text: str):
    """The text's lines, an instruction that spans several joined into one.

    An attribute may hold newlines: jax puts a pallas_call's `kernel_metadata` (a dict, one key a line) in
    the custom call's frontend_attributes, and XLA's own Mosaic kernels break `operand_layout_constraints`
    over lines. Read line by line, such a call lost its metadata (op_name) and backend config."""
    lines = iter(text.splitlines())
    for line in lines:
        if _INSTR.match(line) and _open_braces(line) > 0:
            parts = [line]
            for more in lines:
                parts.append(more.strip())
                if _open_braces(" ".join(parts)) <= 0:
                    break
            line = " ".join(parts)
        yield line


def parse_hlo(text: str) -> HloModule:
    """Computations and instructions of an HLO module's text (unknown lines skipped, counted)."""
    frames = _frames(text)
    comps: dict[str, HloComputation] = {}
    entry = None
    current: HloComputation | None = None
    skipped = 0
    for line in _instruction_lines(text):
        head = _COMP_HEAD.match(line)
        if head:
            current = HloComputation(name=head.group(2), instructions=[], is_entry=bool(head.group(1)))
            comps[current.name] = current
            if current.is_entry:
                entry = current.name
            continue
        if current is None:
            continue
        if line.strip() == "}" or line.startswith("},"):  # a computation's end (`}, execution_thread=...`)
            current = None
            continue
        m = _INSTR.match(line)
        if not m:
            skipped += bool(line.strip())
            continue
        type_text, rest = _split_type(m.group(3))
        opm = re.match(r"([\w\-]+)", rest)
        if not opm:
            skipped += 1
            continue
        operands, attrs = _operands(rest)
        op_name = _OPNAME.search(attrs)
        src = None
        fr = _FRAME.search(attrs)
        if fr and int(fr.group(1)) in frames:
            src = frames[int(fr.group(1))]
        else:
            sm = _SRC.search(attrs)
            if sm:
                src = f"{sm.group(1)}:{sm.group(2)}"
        calls = [c for _, c in _ATTR_REF.findall(attrs)]
        br = _BRANCHES.search(attrs)
        if br:
            calls += re.findall(r"%([\w.\-]+)", br.group(1))
        pnum = re.match(r"parameter\((\d+)\)", rest) if opm.group(1) == "parameter" else None
        lit = re.match(r"constant\(([^)]*)\)", rest) if opm.group(1) == "constant" else None
        current.instructions.append(
            HloInstruction(
                name=m.group(2),
                opcode=opm.group(1),
                shapes=parse_shapes(type_text),
                operands=operands,
                attrs=attrs,
                is_root=bool(m.group(1)),
                op_name=op_name.group(1) if op_name else None,
                source=src,
                calls=calls,
                parameter_number=int(pnum.group(1)) if pnum else None,
                literal=lit.group(1) if lit else None,
            )
        )
    return HloModule(computations=comps, entry=entry, skipped_lines=skipped)
