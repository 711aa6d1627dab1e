"""Read libtpu's LLO text dumps (the compiler's final VLIW schedule) into numbers we can act on.

The dump flags are internal to libtpu (see `llo_dump.py`), so every reader here is defensive: a file
that is missing or does not look like what libtpu 0.0.42 writes yields `None`/empty figures plus a
note, never an exception. Files per program, named `<id>-<program>-<NN>-<kind>.txt`:

- `final_bundles`: one line per bundle (`0x10 LB: > { op ;; op } /* comments */`), `>` marks per
  loop-nesting level, `sbr.rel (...) target = $regionN` branches over predicated regions, DMAs carry
  `size_in_granules`, and the grid's `iteration_bounds: (a, b, c)`;
- `schedule-analysis_final_bundles`: total and empty bundle counts;
- `final_hlo-static-per-bundle-utilization`: unit capacities, then one row of unit use per bundle;
- `pre-finalize-registers-and-allocations`: `#allocationN [... space=vmem, size = 0x..., scoped ...]`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, Field

__all__ = ["InnerLoop", "ProgramLLO", "UnitUse", "WhenRegion", "parse_dump_dir", "parse_program"]

# One DMA granule is 32 bytes: a bf16[256,256] window (131072 B) moves as size_in_granules=4096 and an
# f32[256,256] window (262144 B) as 8192, in our own v5e/v6e compiles (tests/data/llo).
GRANULE_BYTES = 32

MAX_PLAUSIBLE_BYTES = 1 << 40
_BUNDLE = re.compile(r"^\s*(0x[0-9a-fA-F]+|\d+)\s+([A-Z]{2})?\s*:\s*(>*)\s*\{")
_FILE = re.compile(r"^(\d+)-(.+)-(\d\d)-(.+?)\.(txt|html)$")
_BRANCH = re.compile(r"sbr\.rel\s*\(([^)]*)\)\s*target\s*=\s*\$region(\d+)")
_REGION_START = re.compile(r"Start(?:/End empty)? region (\d+)\b")
_DMA = re.compile(r"\bdma\.([a-z_]+)\b[^;]*?size_in_granules=\*/\s*(\d+)")
# The outer loop's exit test: `%p = scmp.ge.s32.totalorder %s14_s16, 26 /* loop exit test */`.
_EXIT = re.compile(r"scmp\.(?:ge|gt)\.s32\S*\s+%\w+,\s*(\d+)\s*/\*[^*]*loop exit test")
_ITER = re.compile(r"iteration_bounds:\s*\(([\d,\s]+)\)")
# An inner loop (a kernel's fori_loop/scan/while): its first bundle is labelled `LB:` at its nesting
# depth, its counter is a phi (`%s543_s27 = sphi %s655_s27, %s144_s27`) of an initial `smov 0` and a
# `sadd.s32 1, %s543_s27`, and it exits on `scmp.ge.s32.totalorder %s144_s27, 16 /* loop exit test */`
# (the test may be predicated: `scmp.ge... (%p161_p6), %s144_s27, 16`). A bound held in a register
# (a trip count known only at run time) has no literal: that loop's trip count is unknown.
# Any op may be predicated: `sadd.s32 (%p161_p6), 1, %s644_s27`, `smov (%p141_p6), 0`.
_PRED = r"(?:\([^)]*\)\s*,\s*)?"
_PHI = re.compile(r"(%s\w+)\s*=\s*sphi\s+(%s\w+)\s*,\s*(%s\w+)")
_SADD = re.compile(r"(%s\w+)\s*=\s*sadd\.s32\s+" + _PRED + r"(\d+)\s*,\s*(%s\w+)")
_SMOV = re.compile(r"(%s\w+)\s*=\s*smov\s+" + _PRED + r"(\d+)\b")
_EXIT_ANY = re.compile(r"scmp\.(ge|gt)\.s32\S*\s+" + _PRED + r"(%s\w+)\s*,\s*(\d+)\s*/\*[^*]*loop exit test")
# The top-level program (TLP) runs every other program of an XLA module as an inlined call, named after its
# HLO instruction: `%93 = inlined_call %s21_s0, %s669_s1 /* %copy.18 = copy(%cache.1) */`.
_SCHEDULED_OP = re.compile(r"scheduled bundles\s*\([^)]*\):\s*%([\w.\-]+)\s*=")
_HLO_NAME = re.compile(r"\bhlo:\s*%?([\w.\-]+)")
_CALL = re.compile(r"inlined_call\b[^/]*/\*\s*%([\w.\-]+)\s*=")
_ALLOC = re.compile(r"#allocation\d+(?=\s*\[)")
_SIZE = re.compile(r"size\s*=\s*(0x[0-9a-fA-F]+|\d+)")

UNITS = ("MXU", "XLU", "VALU", "VPOP", "EUP", "VLOAD", "VLOAD:FILL", "VSTORE", "VSTORE:SPILL", "SALU")


class UnitUse(BaseModel):
    """How one functional unit is used over a set of bundles."""

    busy_fraction: float = Field(description="fraction of the bundles that issue on this unit")
    slot_fraction: float = Field(description="issued slots / (capacity x bundles)")
    capacity: int


class InnerLoop(BaseModel):
    """A loop inside a kernel's body (not the grid loop), as the compiler scheduled it."""

    start: int = Field(description="index of its first bundle in the program")
    bundles: int = Field(description="bundles from its first to its last (one iteration)")
    depth: int = Field(description="nesting depth in the dump (the grid loop is 1)")
    trip_count: int | None = Field(
        None, description="iterations, from its counter and exit test; None: unknown"
    )


class WhenRegion(BaseModel):
    """A region of the grid loop a forward branch skips: one of the kernel's top-level `pl.when` bodies."""

    start: int = Field(description="index of its first bundle in the program")
    bundles: int = Field(description="bundles the branch skips (the delay slots after it run either way)")
    executed_bundles: int = Field(description="its bundles as issued when taken: its loops times their trips")


class DmaInfo(BaseModel):
    kind: str = Field(description="hbm_to_vmem, vmem_to_hbm, ...")
    bytes: int


class ProgramLLO(BaseModel):
    """One compiled program (a pallas_call kernel, or an XLA program) as the compiler scheduled it."""

    program: str
    is_kernel: bool = Field(description="a Mosaic (pallas_call) kernel, else an XLA program")
    total_bundles: int | None = None
    empty_bundles: int | None = None
    straight_line_bundles: int = Field(0, description="bundles outside the grid loop (prologue/epilogue)")
    loop_bundles: int = Field(0, description="bundles in the grid loop body: one grid step")
    predicated_bundles: int = Field(
        0, description="loop bundles in pl.when-sized predicated regions (under half the loop each)"
    )
    predicated_regions: list[int] = Field(
        default_factory=list, description="bundles a taken forward branch skips, per branch in the loop"
    )
    when_regions: list[WhenRegion] = Field(
        default_factory=list,
        description="the kernel's top-level pl.when bodies in the grid loop, in program order: the regions "
        "directly inside the pipeline's stage guard; empty when no guard is found",
    )
    inner_loop_bundles: int = Field(
        0, description="bundles in loops inside the kernel body, each counted once"
    )
    inner_loops: list[InnerLoop] = Field(default_factory=list, description="loops inside the kernel body")
    executed_loop_bundles: int | None = Field(
        None, description="bundles one grid step issues: inner loops times their known trip counts"
    )
    executed_straight_line_bundles: int | None = Field(
        None, description="bundles outside the grid loop as issued: inner loops times their known trip counts"
    )
    loop_trip_count: int | None = Field(
        default=None, description="the grid loop's trip count, from its exit test (pipeline stages included)"
    )
    iteration_bounds: list[int] = Field(default_factory=list, description="the grid, as the compiler saw it")
    loop_units: dict[str, UnitUse] = Field(default_factory=dict, description="unit use over the loop body")
    all_units: dict[str, UnitUse] = Field(default_factory=dict, description="unit use over every bundle")
    spill_stores: int = 0
    spill_fills: int = 0
    dmas_per_step: list[DmaInfo] = Field(default_factory=list, description="DMAs issued in the loop body")
    dmas_outside_loop: list[DmaInfo] = Field(default_factory=list)
    vmem_allocated_bytes: int | None = Field(None, description="sum of the program's VMEM allocations")
    calls: list[tuple[str, int]] = Field(
        default_factory=list,
        description="(HLO instruction, bundle index) of each program it runs as an inlined call (the TLP's)",
    )
    annotated_ops: list[str] = Field(
        default_factory=list,
        description="the HLO instructions its bundles are annotated with (`hlo: NAME`): in the TLP, the "
        "one-element ops it runs inline on the scalar unit",
    )
    loops: list[InnerLoop] = Field(
        default_factory=list, description="every loop (LB: label) in the program, at any depth, in order"
    )
    files: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _read(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _parse_schedule(text: str | None, out: ProgramLLO) -> None:
    if not text:
        return
    m = re.search(r"total scheduled bundles:\s*(\d+)", text)
    e = re.search(r"empty scheduled bundles:\s*(\d+)", text)
    if m:
        out.total_bundles = int(m.group(1))
    if e:
        out.empty_bundles = int(e.group(1))
    # the HLO ops the schedule attributes bundles to ("2.50 scheduled bundles (0.02%): %select_n.182 = ...")
    out.annotated_ops = sorted(set(out.annotated_ops) | set(_SCHEDULED_OP.findall(text)))


def _s32(x: str) -> int:
    v = int(x)
    return v - (1 << 32) if v >= 1 << 31 else v


def _inner_loops(
    rows: list[tuple[int, int, str, str]], labels: list[str], lo: int, hi: int, base: int
) -> list[InnerLoop]:
    """The loops starting (`LB:`) at depth >= `base` in bundles [lo, hi], with their trip counts where the
    dump states them (a literal exit bound, a literal start and step of the counter)."""
    text = [b for _, _, b, _ in rows]
    steps = {m.group(1): (_s32(m.group(2)), m.group(3)) for b in text for m in _SADD.finditer(b)}
    inits = {m.group(1): _s32(m.group(2)) for b in text for m in _SMOV.finditer(b)}
    starts = [i for i in range(lo, hi + 1) if labels[i] == "LB" and rows[i][1] >= base]
    loops = []
    for i in starts:
        d = rows[i][1]
        stop = next((j for j in starts if j > i and rows[j][1] <= d), hi + 1)
        end = max(j for j in range(i, stop) if rows[j][1] >= d)
        phis = {m.group(1): m.group(2) for b in text[i : end + 1] for m in _PHI.finditer(b)}
        trip = None
        for b in text[i : end + 1]:
            for m in _EXIT_ANY.finditer(b):
                step, phi = steps.get(m.group(2), (0, ""))
                if phi not in phis or step <= 0 or phis[phi] not in inits:
                    continue
                bound = int(m.group(3)) + (1 if m.group(1) == "gt" else 0)
                trip = max(1, -(-(bound - inits[phis[phi]]) // step))
        loops.append(InnerLoop(start=i, bundles=end - i + 1, depth=d, trip_count=trip))
    return loops


def _executed(loops: list[InnerLoop], lo: int, hi: int) -> int:
    """Bundles [lo, hi] as issued: each inside a loop counted its (known) trip count times, nested loops multiplied."""
    mult = [1] * (hi - lo + 1)
    for lp in loops:
        if lp.trip_count and lo <= lp.start <= hi:
            for k in range(lp.start, min(hi, lp.start + lp.bundles - 1) + 1):
                mult[k - lo] *= lp.trip_count
    return sum(mult)


def _back_edge_trips(rows: list[tuple[int, int, str, str]], first: int, last: int) -> int | None:
    """The trip count of the loop [first, last] read from its back edge when no exit test is labelled (an XLA
    scatter's row loop): the branch just after it, `sbr.rel (!%p48) target = $region304`, jumps to the region
    its first bundle starts, on `%p48 = scmp.ge.s32 %s49, 8`, where %s49 is the back-edge value of a counter
    `%s4061 = sphi %s4137, %s49` that starts at a literal (`%s4137 = smov 0`) and steps by one (`%s49 =
    sadd.s32 1, ...`). None unless every link of that chain is in the dump."""
    if last + 1 >= len(rows):
        return None
    starts = set(_REGION_START.findall(rows[first][3]))
    back = [
        m.group(1).strip()
        for k in range(last, min(len(rows), last + 3))
        for m in _BRANCH.finditer(rows[k][2])
        if m.group(2) in starts and m.group(1).strip().startswith("!")
    ]
    if len(back) != 1:
        return None
    pred = back[0][1:]
    text = [b for _, _, b, _ in rows]
    cmp = re.compile(re.escape(pred) + r"\s*=\s*scmp\.(ge|gt)\.s32\S*\s+(%s\w+)\s*,\s*(\d+)\b")
    test = [m for b in text[first : last + 1] for m in cmp.finditer(b)]
    phis = {m.group(3): m.group(2) for m in _PHI.finditer(text[first])}  # back-edge value -> initial value
    if len(test) != 1 or test[0].group(2) not in phis:
        return None
    counter = test[0].group(2)
    steps = [
        int(m.group(2)) for b in text[first : last + 1] for m in _SADD.finditer(b) if m.group(1) == counter
    ]
    inits = [_s32(m.group(2)) for b in text[:first] for m in _SMOV.finditer(b) if m.group(1) == phis[counter]]
    if len(steps) != 1 or steps[0] <= 0 or len(inits) != 1:
        return None
    bound = int(test[0].group(3)) + (1 if test[0].group(1) == "gt" else 0)
    return max(1, -(-(bound - inits[0]) // steps[0]))


def _when_regions(
    rows: list[tuple[int, int, str, str]], spans: list[tuple[int, int]], loops: list[InnerLoop]
) -> list[WhenRegion]:
    """The kernel body's top-level pl.when regions: the regions directly inside the pipeline's stage guard.

    Mosaic's pipeline wraps a grid step's body (its DMA waits, the kernel, its next DMAs) in one branch that
    skips it on the pipeline's fill and drain iterations; that guard is the outermost region holding a
    `pipeline-emitter-dma-wait`. The kernel's own `scf.if`s (pl.when) are the regions nested directly in it:
    a pl.when nested in another is part of its parent's region. Its size says nothing (a 50k matmul's
    GELU + softmax epilogue is 73% of the loop), so the guard is found by what it holds. Empty when no guard
    is found."""
    waits = [k for k, (_, _, b, _) in enumerate(rows) if "pipeline-emitter-dma-wait" in b]
    guards = [(i, j) for i, j in spans if any(i < k < j for k in waits)]
    if not guards:
        return []
    gi, gj = max(guards, key=lambda s: s[1] - s[0])
    inside = [(i, j) for i, j in spans if gi < i and j <= gj and (i, j) != (gi, gj)]
    top = [s for s in inside if not any(o[0] < s[0] and s[1] <= o[1] for o in inside if o != s)]
    out = []
    for i, j in sorted(top):
        lo = i + 1
        while lo < j and not rows[lo][2]:  # the branch's delay slots (empty) run either way
            lo += 1
        if lo >= j:
            continue
        out.append(WhenRegion(start=lo, bundles=j - lo, executed_bundles=_executed(loops, lo, j - 1)))
    return out


def _parse_bundles(text: str | None, out: ProgramLLO) -> list[int]:
    """Fill loop/straight-line/predicated counts and DMAs; return each bundle's grid-loop depth, in order."""
    if not text:
        out.notes.append("no final_bundles file")
        return []
    rows: list[tuple[int, int, str, str]] = []  # (address, depth, body, comment)
    labels: list[str] = []
    for line in text.splitlines():
        m = _BUNDLE.match(line)
        if not m:
            continue
        rest = line[m.end() :].rstrip()
        cut = rest.rfind("} /*") if rest.endswith("*/") else -1
        body, comment = (rest[:cut], rest[cut + 1 :]) if cut >= 0 else (rest.removesuffix("}"), "")
        rows.append((int(m.group(1), 0), len(m.group(3)), body.strip(), comment))
        labels.append(m.group(2) or "")
    if not rows:
        out.notes.append("final_bundles has no bundle lines in the expected format")
        return []
    it = _ITER.search(text)
    if it:
        out.iteration_bounds = [int(x) for x in it.group(1).replace(" ", "").split(",") if x]
    depths = [d for _, d, _, _ in rows]
    out.calls = [(m.group(1), i) for i, (_, _, b, _) in enumerate(rows) for m in [_CALL.search(b)] if m]
    out.annotated_ops = sorted(set(out.annotated_ops) | set(_HLO_NAME.findall(text)))
    out.loops = _inner_loops(rows, labels, 0, len(rows) - 1, 1)
    # A kernel with one grid step has no grid loop: its depth-1 loops are the body's own (a fori_loop).
    no_grid_loop = out.is_kernel and bool(out.iteration_bounds) and all(b == 1 for b in out.iteration_bounds)
    if no_grid_loop:
        out.inner_loops = _inner_loops(rows, labels, 0, len(rows) - 1, 1)
        out.inner_loop_bundles = sum(lp.bundles for lp in out.inner_loops if lp.depth == 1)
        out.executed_straight_line_bundles = _executed(out.inner_loops, 0, len(rows) - 1)
        depths = [0] * len(rows)
    in_loop = [i for i, d in enumerate(depths) if d >= 1]
    if in_loop:
        first, last = in_loop[0], in_loop[-1]
        loop = range(first, last + 1)  # empty delay-slot bundles inside the loop carry no '>'
    else:
        first, last, loop = len(rows), -1, range(0)
    out.loop_bundles = len(loop)
    exits = [int(m.group(1)) for i in loop for m in [_EXIT.search(rows[i][2])] if m and depths[i] == 1]
    if exits:
        out.loop_trip_count = exits[-1]
    elif in_loop:
        out.loop_trip_count = _back_edge_trips(rows, first, last)
    out.straight_line_bundles = len(rows) - len(loop)
    if in_loop:
        out.inner_loops = _inner_loops(rows, labels, first, last, 2)
        out.inner_loop_bundles = sum(lp.bundles for lp in out.inner_loops if lp.depth == 2)
        out.executed_loop_bundles = _executed(out.inner_loops, first, last)
    if out.total_bundles is None:
        out.total_bundles = len(rows)
        out.empty_bundles = sum(1 for _, _, b, _ in rows if not b)

    # Predicated regions: a forward branch inside the loop to a region that starts later in the loop.
    region_at: dict[int, int] = {}
    for i, (_, _, _, comment) in enumerate(rows):
        for r in _REGION_START.findall(comment):
            region_at.setdefault(int(r), i)
    spans: list[tuple[int, int]] = []  # (branch bundle, first bundle after the skipped region)
    for i in loop:
        for _, region in _BRANCH.findall(rows[i][2]):
            j = region_at.get(int(region))
            if j is not None and i < j <= last:
                spans.append((i, j))
                out.predicated_regions.append(sum(1 for k in range(i + 1, j) if rows[k][2]))
    out.when_regions = _when_regions(rows, spans, out.inner_loops)
    if out.when_regions:
        out.predicated_bundles = sum(r.bundles for r in out.when_regions)
    else:  # no stage guard found: a branch over most of the loop is taken for it, not for a pl.when
        skippable: set[int] = set()
        for i, j in spans:
            span = [k for k in range(i + 1, j) if rows[k][2]]  # delay slots are empty
            if len(span) < len(loop) / 2:
                skippable.update(span)
        out.predicated_bundles = len(skippable)

    for i, (_, _, body, _) in enumerate(rows):
        for kind, granules in _DMA.findall(body):
            d = DmaInfo(kind=kind, bytes=int(granules) * GRANULE_BYTES)
            (out.dmas_per_step if first <= i <= last else out.dmas_outside_loop).append(d)
    return depths


def _units(rows: list[list[int]], caps: list[int]) -> dict[str, UnitUse]:
    if not rows:
        return {}
    n = len(rows)
    use = {}
    for j, name in enumerate(UNITS[: len(caps)]):
        col = [r[j] for r in rows if len(r) > j]
        use[name] = UnitUse(
            busy_fraction=sum(1 for v in col if v > 0) / n,
            slot_fraction=sum(col) / (max(caps[j], 1) * n),
            capacity=caps[j],
        )
    return use


def _parse_utilization(text: str | None, depths: list[int], out: ProgramLLO) -> None:
    if not text:
        out.notes.append("no per-bundle utilization file")
        return
    lines = [ln.strip() for ln in text.splitlines()]
    try:
        head = next(i for i, ln in enumerate(lines) if ln.startswith("MXU"))
        names = [x.strip() for x in lines[head].split(",")]
        caps = [int(x) for x in lines[head + 1].split()]
        start = next(i for i, ln in enumerate(lines) if ln.startswith("== UTILIZATION")) + 1
    except (StopIteration, ValueError, IndexError):
        out.notes.append("utilization file not in the expected format")
        return
    if tuple(names[: len(UNITS)]) != UNITS[: len(names)]:
        out.notes.append(f"utilization columns changed: {names}")
        return
    rows = []
    for ln in lines[start:]:
        parts = ln.split()
        if parts and all(p.isdigit() for p in parts):
            rows.append([int(p) for p in parts])
    out.all_units = _units(rows, caps)
    spill_col, fill_col = UNITS.index("VSTORE:SPILL"), UNITS.index("VLOAD:FILL")
    out.spill_stores = sum(r[spill_col] for r in rows if len(r) > spill_col)
    out.spill_fills = sum(r[fill_col] for r in rows if len(r) > fill_col)
    if depths and len(depths) == len(rows):
        in_loop = [i for i, d in enumerate(depths) if d >= 1]
        if in_loop:
            out.loop_units = _units(rows[in_loop[0] : in_loop[-1] + 1], caps)
    elif depths:
        out.notes.append(
            f"utilization rows ({len(rows)}) do not match bundles ({len(depths)}): loop units unknown"
        )


def _parse_allocations(text: str | None, out: ProgramLLO) -> None:
    if not text:
        return
    total, seen = 0, set()
    for line in text.splitlines():
        m = _ALLOC.search(line)
        if not m or m.group(0) in seen or "space=vmem" not in line.replace(" ", ""):
            continue
        seen.add(m.group(0))
        size = _SIZE.search(line)
        if size and int(size.group(1), 0) < MAX_PLAUSIBLE_BYTES:  # sentinels like 0xffff... are not sizes
            total += int(size.group(1), 0)
    out.vmem_allocated_bytes = total


def parse_program(files: dict[str, Path], program: str) -> ProgramLLO:
    """Parse one program's dump files (kind -> path)."""
    bundles = _read(files.get("final_bundles"))
    is_kernel = bool(bundles and "tpu_custom_call" in bundles) or bool(
        bundles and re.search(r"entry bundle: %\S+ = custom-call", bundles)
    )
    out = ProgramLLO(program=program, is_kernel=is_kernel, files=sorted(p.name for p in files.values()))
    _parse_schedule(_read(files.get("schedule-analysis_final_bundles")), out)
    depths = _parse_bundles(bundles, out)
    _parse_utilization(_read(files.get("final_hlo-static-per-bundle-utilization")), depths, out)
    _parse_allocations(_read(files.get("pre-finalize-registers-and-allocations")), out)
    return out


def group_files(paths: list[Path]) -> dict[tuple[str, str], dict[str, Path]]:
    """(dump id, program name) -> {kind: path} for files named like libtpu's LLO dumps."""
    groups: dict[tuple[str, str], dict[str, Path]] = defaultdict(dict)
    for p in paths:
        m = _FILE.match(p.name)
        if m:
            groups[(m.group(1), m.group(2))][m.group(4)] = p
    return dict(groups)


def parse_dump_dir(path: str | Path, only: set[str] | None = None) -> list[ProgramLLO]:
    """Every program in a dump folder (optionally only these file names), skipping libtpu's own stubs."""
    root = Path(path)
    if not root.is_dir():
        return []
    files = [p for p in root.iterdir() if p.is_file() and (only is None or p.name in only)]
    programs = []
    for (_, name), kinds in sorted(group_files(files).items()):
        if name.startswith("<") or "final_bundles" not in kinds:
            continue  # <late-initialization> etc.: the runtime's own programs
        programs.append(parse_program(kinds, name))
    return programs
