"""An XLA program costed fusion by fusion: what XLA emitted for the TPU, each piece bound on its own.

A plain-JAX program on TPU is a chain of fusions (and copies, reductions, collectives) that run one
after another. Each is bound by its own work: a matmul fusion by the MXU, a softmax pass by HBM, a
reduce-window by the VPU. The roofline of the whole program's flops and bytes hides that (attention's
scores pass through HBM several times while the matmuls are cheap), so the XLA baseline and every
region of a model's profile are costed here: one `FusionCost` per top-level op of the TPU-compiled
HLO, its flops and bytes read from the HLO itself (shapes, tile padding, buffers XLA keeps in VMEM),
its time the slowest of MXU, VPU and HBM, and the compiler's own schedule (LLO bundles x the loop's
trip count / clock) where the dump has that program and the chip a clock. A while loop's body is
costed once per known trip. The program adds a fixed launch cost. Every constant says where it is from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.call_estimate import estimate_call, fmt_bytes
from maxkernel.tpu_tools.cost.hlo_text import HloComputation, HloInstruction, HloModule, Shape, parse_hlo
from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO
from maxkernel.tpu_tools.cost.mosaic_call import declared_cost, kernel_call
from maxkernel.tpu_tools.hardware.chips import ChipSpec, get_chip
from maxkernel.tpu_tools.hardware.megacore import cores_per_device

__all__ = [
    "FusionCost",
    "FusionTable",
    "cost_fusions",
    "cost_hlo_text",
    "program_launch_us",
    "top_level_program",
]

# Fixed cost of launching one TPU program, and of starting each fusion in it (its pipeline's first window
# fetched and last one written back without overlap). Not fitted (no device-time data of tiny programs
# here): the v5e JAX docs' XLA 1024^3 bf16 matmul takes 119 us of `timeit`, of which ~100 us is host
# dispatch (calibration README) and ~11 us its roofline, leaving a few us per program; one DMA round
# trip (~1 us) per fusion is an assumption.
PROGRAM_OVERHEAD_US = 5.0
FUSION_OVERHEAD_US = 1.0
# Fraction of the chip table's HBM bandwidth an XLA fusion streaming large arrays reaches. Fitted: the
# geometric mean of (our estimate at 100%) / (published xprof time) over the six v6e `xla_plain_einsum_softmax`
# rows of /work/shared/calibration/published_v6e.csv (ratios 0.749, 0.735, 0.897, 0.824, 0.927, 0.918 for
# [2,8192,16,128] N/Y, [8,2048,16,128] Y, [4,4096,8,256] Y, [16,1024,8,256] N, [32,512,32,64] N) = 0.838.
XLA_HBM_EFFICIENCY = 0.84
FIT_NOTES = (
    "XLA_HBM_EFFICIENCY fitted on the six v6e XLA attention rows of shared/calibration; the fixed costs not"
)

# VPU: element-ops per cycle (8 sublanes x 128 lanes x 2 useful ops), as estimate.py assumes for kernels.
VPU_ELEMENT_OPS_PER_CYCLE = 8 * 128 * 2
TRANSCENDENTAL_VPU_OPS = 4

FREE_OPS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
            "replica-id", "opt-barrier", "add-dependency", "copy-done", "domain", "iota"}  # fmt: skip
TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic", "rsqrt",
                  "sqrt", "cbrt", "power", "sine", "cosine", "tan", "atan2", "erf"}  # fmt: skip
# Ops inside a fusion that move or reinterpret data without VPU arithmetic.
NO_VPU = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "broadcast", "reshape", "slice",
          "dynamic-slice", "dynamic-update-slice", "iota", "transpose", "copy", "concatenate", "pad", "reverse"}  # fmt: skip
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all",
               "all-reduce-start", "all-gather-start", "collective-permute-start", "ragged-all-to-all"}  # fmt: skip


class FusionCost(BaseModel):
    """One top-level op of the compiled program (a fusion, copy, convolution, loop ...), costed on its own."""

    name: str = Field(description="HLO instruction name, e.g. 'fusion.12'")
    opcode: str
    fusion_kind: str | None = Field(default=None, description="kLoop | kInput | kOutput | kCustom")
    op_names: list[str] = Field(
        default_factory=list, description="jax name stacks of the instructions inside (metadata op_name)"
    )
    source: list[str] = Field(default_factory=list, description="'file:line' of those instructions")
    output_shapes: list[str] = Field(default_factory=list)
    flops: float = Field(description="MXU flops (dot/convolution) inside")
    vpu_ops: float = Field(0.0, description="element-ops of the elementwise/reduction work inside")
    bytes_accessed: float = Field(description="HBM bytes read and written (VMEM-resident buffers excluded)")
    transcendentals: float = 0.0
    count: int = Field(1, description="times it runs (a while body's trip count)")
    mxu_time_us: float = 0.0
    vpu_time_us: float = 0.0
    hbm_time_us: float = 0.0
    llo_time_us: float | None = Field(default=None, description="compiler's bundles x trip count / clock")
    estimated_time_us: float = Field(description="all `count` runs, with the per-fusion fixed cost")
    tier: Literal["llo", "model"] = "model"
    bound: Literal["compute", "memory", "overhead"]
    notes: list[str] = Field(default_factory=list)
    fallback: str | None = Field(default=None, description="why this op is at the model tier (None: llo)")


class FusionTable(BaseModel):
    """The compiled program's fusions, each costed on its own, and their sum plus the per-program cost."""

    chip: str
    fusions: list[FusionCost]
    program_overhead_us: float
    total_us: float = Field(description="sum of the fusions' times + the per-program cost")
    tier: Literal["llo", "model"] = Field(description="llo only when every costed fusion is")
    note: str = ""
    whole_program_roofline_us: float = Field(
        description="the old baseline: roofline of the program's total flops and bytes (shown beside it)"
    )
    flops: float = 0.0
    bytes_accessed: float = 0.0
    program_tier: Literal["llo", "model"] = Field(
        default="model",
        description="llo: the launch is the top-level program's own bundles; model: a fixed cost",
    )
    fallbacks: list[str] = Field(
        default_factory=list, description="'name (opcode): why' of every op costed at the model tier"
    )
    assumptions: list[str] = Field(default_factory=list)

    def top(self, n: int = 8) -> list[FusionCost]:
        return sorted(self.fusions, key=lambda f: -f.estimated_time_us)[:n]


# ---------------------------------------------------------------------------------------------------
# Work inside one computation


def _symbols(comp: HloComputation) -> dict[str, HloInstruction]:
    return comp.by_name()


def _dims_attr(ins: HloInstruction, key: str) -> list[int]:
    m = re.search(rf"\b{key}=\{{([\d,]*)\}}", ins.attrs)
    return [int(x) for x in m.group(1).split(",") if x] if m else []


def _dot_flops(ins: HloInstruction, table: dict[str, HloInstruction]) -> float:
    out = ins.shapes[0].elements if ins.shapes else 0
    lhs = table.get(ins.operands[0]) if ins.operands else None
    if lhs is None or not lhs.shapes:
        return 0.0
    contract = math.prod(
        lhs.shapes[0].dims[d] for d in _dims_attr(ins, "lhs_contracting_dims") if d < len(lhs.shapes[0].dims)
    )
    return 2.0 * out * contract


def _conv_flops(ins: HloInstruction, table: dict[str, HloInstruction]) -> float:
    """2 x outputs x input features x the window taps that land on real (undilated, unpadded) input.

    XLA on TPU writes some matmuls as convolutions whose window mostly covers padding (a GQA projection:
    window size=32 pad=31_31 over a size-1 spatial axis; attention's grouped heads: lhs_dilate=8): only
    the taps on real input are work, counted exactly per spatial axis (separable: the product of sums)."""
    out = ins.shapes[0].elements if ins.shapes else 0
    lhs = table.get(ins.operands[0]) if ins.operands else None
    rhs = table.get(ins.operands[1]) if len(ins.operands) > 1 else None
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", ins.attrs)
    if rhs is None or not rhs.shapes or not labels:
        return 0.0
    kernel = labels.group(2)
    i_dim = kernel.find("i")
    feat = rhs.shapes[0].dims[i_dim] if 0 <= i_dim < len(rhs.shapes[0].dims) else 1
    win = re.search(r"window=\{([^}]*)\}", ins.attrs)
    if not win:
        return 2.0 * out * feat

    def field(key: str, n: int, default: int) -> list[int]:
        m = re.search(rf"\b{key}=([\dx]+)", win.group(1))
        vals = [int(x) for x in m.group(1).split("x")] if m else []
        return vals + [default] * (n - len(vals))

    size_m = re.search(r"\bsize=([\dx]+)", win.group(1))
    sizes = [int(x) for x in size_m.group(1).split("x")] if size_m else []
    n = len(sizes)
    strides, dils, wdils = field("stride", n, 1), field("lhs_dilate", n, 1), field("rhs_dilate", n, 1)
    pad_m = re.search(r"\bpad=([\d_x-]+)", win.group(1))
    pads = [tuple(int(v) for v in p.split("_")) for p in pad_m.group(1).split("x")] if pad_m else []
    pads += [(0, 0)] * (n - len(pads))
    in_labels, out_labels = labels.group(1), labels.group(3)
    out_dims = ins.shapes[0].dims if ins.shapes else ()
    real, positions = 1, 1
    for k in range(n):
        li, lo_ = in_labels.find(str(k)), out_labels.find(str(k))
        if lhs is None or not lhs.shapes or li < 0 or lo_ < 0 or lo_ >= len(out_dims):
            real, positions = real * -(-sizes[k] // max(dils[k], 1)), positions  # old bound
            continue
        n_in, m_out, d = lhs.shapes[0].dims[li], out_dims[lo_], max(dils[k], 1)
        span = (n_in - 1) * d  # last real position of the dilated input
        count = 0
        for o in range(m_out):
            for t in range(sizes[k]):
                p = o * strides[k] + t * wdils[k] - pads[k][0]
                count += 0 <= p <= span and p % d == 0
        real *= count
        positions *= m_out
    return 2.0 * (out / max(positions, 1)) * feat * real


def _passes(ins: HloInstruction) -> int:
    """MXU passes per matmul: f32 at HIGHEST precision is 6 bf16 passes, HIGH 3, DEFAULT 1 (XLA on TPU)."""
    a = ins.attrs.lower()
    if "highest" in a or "f32_f32_f32" in a or "_x6" in a:
        return 6
    if re.search(r"operand_precision=\{high", a) or "_x3" in a:
        return 3
    return 1


def _matmul_dtype(ins: HloInstruction, table: dict[str, HloInstruction]) -> str:
    ops = [table[o].shapes[0].dtype for o in ins.operands[:2] if o in table and table[o].shapes]
    if ops and all(d in ("s8", "u8") for d in ops):
        return "int8"
    return "bfloat16"


class _Work:
    __slots__ = ("dtype", "flops", "mxu_flops_bf16", "notes", "op_names", "sources", "trans", "vpu")

    def __init__(self) -> None:
        self.flops = 0.0
        self.mxu_flops_bf16 = 0.0  # flops x passes at the operands' MXU rate, in bf16-equivalent flops
        self.vpu = 0.0
        self.trans = 0.0
        self.op_names: list[str] = []
        self.sources: list[str] = []
        self.notes: list[str] = []  # where work an opaque op hides was found (a custom call's)
        self.dtype = "bfloat16"


def _ragged_dot_flops(ins: HloInstruction, table: dict[str, HloInstruction]) -> float:
    """2*M*K*N of a ragged dot lhs [M,K] x rhs [G,K,N] -> out [M,N] (group sizes summing to M), from shapes.

    Each row of lhs meets one group's [K,N] matrix, so the work is that of one [M,K]x[K,N] matmul however
    the M rows split over the G groups (the kernel's per-group tile padding is not counted)."""
    if not ins.shapes or len(ins.shapes[0].dims) != 2:
        return 0.0
    m, n = ins.shapes[0].dims
    arrays = [table[o].shapes[0] for o in ins.operands if o in table and table[o].shapes]
    for lhs, rhs in zip(arrays, arrays[1:], strict=False):
        if len(lhs.dims) == 2 and len(rhs.dims) == 3 and lhs.dims[0] == m and rhs.dims[2] == n:
            if lhs.dims[1] == rhs.dims[1]:
                return 2.0 * m * lhs.dims[1] * n
    return 0.0


def _custom_call_work(ins: HloInstruction, table: dict[str, HloInstruction], work: _Work) -> bool:
    """The MXU work of a custom call (a Mosaic kernel XLA emitted, e.g. lax.ragged_dot's grouped matmul).

    Its body is opaque in the HLO text, so its flops come from the `cost_estimate` the kernel declares in
    its backend_config (XLA fills it for its own ragged dot: 2*M*K*N), else, for a ragged dot, from its
    operand shapes. Bytes stay the caller's: its operands read and outputs written, VMEM ones excluded.
    Says how the flops were found in `work.notes`; False when none were."""
    ce = declared_cost(ins.backend_config())
    flops, trans = (float(ce.flops), float(ce.transcendentals)) if ce else (0.0, 0.0)
    how = "custom call: flops from the kernel's declared cost_estimate"
    if flops <= 0 and ("ragged_dot" in ins.attrs or "ragged-dot" in ins.attrs):
        flops = _ragged_dot_flops(ins, table)
        how = "custom call: a ragged dot, flops 2*M*K*N from its operand shapes"
    if flops <= 0 and trans <= 0:
        return False
    arrays = [o for o in ins.operands if o in table and table[o].shapes and len(table[o].shapes[0].dims) >= 2]
    probe = HloInstruction(name=ins.name, opcode="dot", shapes=ins.shapes, operands=arrays[-2:], attrs="")
    work.dtype = _matmul_dtype(probe, table)
    work.flops += flops
    work.mxu_flops_bf16 += flops  # one MXU pass: the kernel's operands at their own rate
    work.trans += trans
    if how not in work.notes:
        work.notes.append(how)
    return True


def _walk(
    module: HloModule,
    comp: HloComputation,
    work: _Work,
    depth: int = 0,
    table: dict[str, HloInstruction] | None = None,
) -> None:
    """Accumulate the arithmetic inside a fused computation (nested fusions included)."""
    table = table if table is not None else _symbols(comp)
    for ins in comp.instructions:
        if ins.op_name and ins.op_name not in work.op_names and ins.opcode != "parameter":
            work.op_names.append(ins.op_name)
        if ins.source and ins.source not in work.sources:
            work.sources.append(ins.source)
        op = ins.opcode
        out = sum(s.elements for s in ins.shapes)
        if op == "fusion" and depth < 8:
            for c in ins.calls:
                if c in module.computations:
                    _walk(module, module.computations[c], work, depth + 1)
        elif op in ("dot", "convolution"):
            f = _dot_flops(ins, table) if op == "dot" else _conv_flops(ins, table)
            work.flops += f
            work.mxu_flops_bf16 += f * _passes(ins)
            work.dtype = _matmul_dtype(ins, table)
        elif op == "custom-call" and _custom_call_work(ins, table, work):
            pass
        elif op == "scatter":  # its combiner runs once per update element, not per element of the result
            n = (len(ins.operands) - 1) // 2
            work.vpu += sum(
                table[o].shapes[0].elements for o in ins.operands[n + 1 :] if o in table and table[o].shapes
            )
        elif op in TRANSCENDENTAL:
            work.trans += out
        elif op in ("reduce", "reduce-window"):
            src = table.get(ins.operands[0]) if ins.operands else None
            n_in = src.shapes[0].elements if src is not None and src.shapes else out
            if op == "reduce-window":
                size = re.search(r"window=\{size=([\dx]+)", ins.attrs)
                win = math.prod(int(x) for x in size.group(1).split("x")) if size else 1
                n_in = out * max(1, math.ceil(math.log2(max(win, 2))))  # a log-depth scan, not win x out
            work.vpu += n_in
        elif op not in NO_VPU:
            work.vpu += out


# ---------------------------------------------------------------------------------------------------
# Bytes one top-level op moves between HBM and the core


# Memory spaces in a TPU layout that are on the core, not HBM: S(1) VMEM, S(2) sync flags, S(6) SMEM (a
# loop's index XLA keeps in scalar memory).
ON_CORE_SPACES = {1, 2, 6}


def _hbm(shapes: Sequence[Shape]) -> int:
    return sum(s.nbytes for s in shapes if s.memory_space not in ON_CORE_SPACES)


def _param_reads(module: HloModule, ins: HloInstruction, table: dict[str, HloInstruction]) -> float:
    """Bytes the fusion reads of each operand: the slice it takes when it only slices it, else all of it."""
    fused = module.computations.get(ins.calls[0]) if ins.calls else None
    sliced: dict[int, float] = {}
    skipped: set[int] = set()
    if fused is not None:
        params = {i.name: i.parameter_number for i in fused.instructions if i.parameter_number is not None}
        users: dict[str, list[HloInstruction]] = {}
        for i in fused.instructions:
            for o in i.operands:
                users.setdefault(o, []).append(i)
        for name, pos in params.items():
            us = users.get(name, [])
            if us and all(u.opcode in ("slice", "dynamic-slice", "gather") for u in us):
                sliced[pos] = float(sum(_hbm(u.shapes) for u in us))
            # An in-place update: the buffer XLA writes into is aliased, not read (but for the rows a scatter
            # combines its updates with: `.at[i].add(x)` reads them; `.set(x)` does not).
            if us and all(u.opcode in IN_PLACE and u.operands[0] == name for u in us):
                skipped.add(pos)
                ftable = fused.by_name()
                sliced[pos] = sum(
                    float(ftable[o].shapes[0].nbytes)
                    for u in us
                    if u.opcode == "scatter" and _combines(module, u)
                    for o in u.operands[(len(u.operands) + 1) // 2 :]
                    if o in ftable and ftable[o].shapes
                )
    total = 0.0
    for pos, o in enumerate(ins.operands):
        src = table.get(o)
        if src is not None and pos in skipped:
            total += sliced.get(pos, 0.0) if _hbm(src.shapes[:1]) else 0.0
            continue
        if src is None:
            continue
        full = float(_hbm(src.shapes if src.opcode != "get-tuple-element" else src.shapes[:1]))
        total += min(full, sliced.get(pos, full))
    return total


def _called(
    module: HloModule, ins: HloInstruction, attr: str
) -> tuple[HloComputation | None, dict[str, HloInstruction], HloInstruction | None]:
    """The computation `ins` names in `attr` (to_apply, condition ...), its table by name and its root."""
    m = re.search(rf"\b{attr}=%([\w.\-]+)", ins.attrs)
    comp = module.computations.get(m.group(1)) if m else None
    if comp is None:
        return None, {}, None
    return comp, comp.by_name(), next((i for i in comp.instructions if i.is_root), None)


def _combines(module: HloModule, scatter: HloInstruction) -> bool:
    """Whether a scatter's combiner reads the value it replaces (add, max ...), not only its update (set)."""
    comp, table, root = _called(module, scatter, "to_apply")
    if comp is None:
        return True
    while root is not None and root.opcode == "bitcast" and root.operands:
        root = table.get(root.operands[0])
    return not (root is not None and root.opcode == "parameter" and root.parameter_number == 1)


# Ops XLA runs in place on their first operand's buffer when it is the fusion's parameter: the fusion's output
# aliases that operand (`aliasing_operands` in its backend config), and only the update moves.
IN_PLACE = {"dynamic-update-slice", "scatter"}


def _in_place_update(comp: HloComputation, name: str, depth: int = 0) -> list[HloInstruction] | None:
    """The updates a fused output writes when it is an in-place dynamic-update-slice or scatter of a parameter
    (through bitcasts): XLA aliases the buffer to the fusion's operand, so only the updates move (a scatter's
    rows: its updates operand; a KV cache's `cache.at[slots].set(kv)`). None otherwise."""
    table = comp.by_name()
    ins = table.get(name)
    while ins is not None and ins.opcode == "bitcast" and ins.operands and depth < 8:
        ins, depth = table.get(ins.operands[0]), depth + 1
    if ins is None or ins.opcode not in IN_PLACE or len(ins.operands) < 2:
        return None
    buf = table.get(ins.operands[0])
    while buf is not None and buf.opcode == "bitcast" and buf.operands:
        buf = table.get(buf.operands[0])
    if buf is None or buf.opcode != "parameter":
        return None
    if ins.opcode == "dynamic-update-slice":
        upd = [table.get(ins.operands[1])]
    else:  # scatter(operands..., indices, updates...): one operand (the cache) here, a tuple of them is rare
        n = (len(ins.operands) - 1) // 2
        upd = [table.get(o) for o in ins.operands[n + 1 :]] if n == 1 else [None]
    return upd if all(u is not None for u in upd) else None


def _writes(module: HloModule, ins: HloInstruction) -> float:
    """Bytes written: an output that is an in-place dynamic-update-slice writes only its update (a root
    tuple's elements each on their own: a loop body's fusion returns the updated cache beside its carry)."""
    fused = module.computations.get(ins.calls[0]) if ins.calls else None
    if fused is None:
        return float(_hbm(ins.shapes))
    root = next((i for i in fused.instructions if i.is_root), None)
    if root is None:
        return float(_hbm(ins.shapes))
    outs = root.operands if root.opcode == "tuple" else [root.name]
    if root.opcode == "tuple" and len(outs) != len(ins.shapes):
        return float(_hbm(ins.shapes))
    total = 0.0
    for k, name in enumerate(outs):
        shape = ins.shapes[k : k + 1] if root.opcode == "tuple" else ins.shapes[:1]
        upd = _in_place_update(fused, name)
        if upd is not None and _hbm(shape):
            total += float(sum(s.nbytes for u in upd for s in u.shapes))
        else:
            total += float(_hbm(shape))
    return total


# ---------------------------------------------------------------------------------------------------
# Time


def _clock_hz(c: ChipSpec) -> float:
    return (
        (c.clock_ghz * 1e9)
        if c.clock_ghz
        else c.peak_bf16_flops_per_s / (2 * c.mxu_shape[0] * c.mxu_shape[1] * c.num_mxus)
    )


def _llo_by_name(programs: Sequence[ProgramLLO] | None) -> dict[str, ProgramLLO]:
    """Programs by name: XLA's fusions, and Mosaic kernels (named after their custom call)."""
    return {p.program: p for p in programs or ()}


def _llo_bundles(p: ProgramLLO) -> int | None:
    """Bundles the program issues: straight-line + loop body x the loop's trip count (None if unknown);
    a Mosaic kernel's inner loops count their known trip counts (llo_parse's executed bundles)."""
    line = p.straight_line_bundles
    if p.executed_straight_line_bundles is not None:
        line = p.executed_straight_line_bundles
    if not p.loop_bundles:
        return line or p.total_bundles
    trips = getattr(p, "loop_trip_count", None)
    if not trips and not p.is_kernel and p.iteration_bounds and all(b > 0 for b in p.iteration_bounds):
        trips = math.prod(p.iteration_bounds)  # an XLA fusion's loop walks its windows once each
    if not trips:
        return None
    body = p.executed_loop_bundles if p.executed_loop_bundles is not None else p.loop_bundles
    return line + body * trips


def _cost_op(
    module: HloModule,
    ins: HloInstruction,
    table: dict[str, HloInstruction],
    c: ChipSpec,
    cores: int,
    llo: dict[str, ProgramLLO],
    count: int,
    tlp: ProgramLLO | None = None,
) -> FusionCost:
    """One op's cost: from its own LLO program where the dump has one (tier llo), else from its HLO.

    `tlp`: the module's top-level program, when dumped. An op it runs inline (a scalar op, an async copy it
    issues) has no program of its own: it is no launch, and its bundles are the TLP's (costed once, there)."""
    work = _Work()
    if ins.opcode == "fusion":
        for cname in ins.calls:
            if cname in module.computations:
                _walk(module, module.computations[cname], work)
    else:
        # A lone op (copy, convolution, reduce ...): its own work, its operands' shapes from the caller.
        _walk(module, HloComputation(name=ins.name, instructions=[ins]), work, table=table)
        work.op_names = [ins.op_name] if ins.op_name else []
        work.sources = [ins.source] if ins.source else []
    notes: list[str] = list(work.notes)
    if ins.opcode == "slice-start" and len(ins.shapes) >= 2:
        # An async slice ((operand), slice, context): it reads the slice, not the whole operand it names,
        # and writes the slice where XLA put it (VMEM, S(1), costs no HBM bytes).
        src = table.get(ins.operands[0]) if ins.operands else None
        in_hbm = src is not None and bool(_hbm(src.shapes[:1]))
        nbytes = (ins.shapes[1].nbytes if in_hbm else 0.0) + float(_hbm(ins.shapes[1:2]))
    elif ins.opcode == "dynamic-update-slice" and len(ins.operands) > 1 and ins.operands[1] in table:
        # In place (XLA aliases the operand buffer to the result): the update is read and written, no more.
        upd = float(_hbm(table[ins.operands[1]].shapes[:1]))
        nbytes = upd + (float(table[ins.operands[1]].shapes[0].nbytes) if _hbm(ins.shapes) else 0.0)
        notes.append("in-place dynamic-update-slice: only the update moves")
    elif ins.opcode == "dynamic-slice":
        nbytes = 2.0 * float(_hbm(ins.shapes)) or float(sum(s.nbytes for s in ins.shapes))
    else:
        reads = (
            _param_reads(module, ins, table)
            if ins.opcode == "fusion"
            else float(sum(_hbm(table[o].shapes[:1]) for o in ins.operands if o in table))
        )
        # An async copy (copy-start: (destination, source, context)) writes its destination: nothing when that
        # is VMEM (a prefetch), all of it when it is HBM (a VMEM buffer written back: a non-donated cache that
        # XLA updated in VMEM goes out again); charged as if not overlapped.
        nbytes = reads + (float(_hbm(ins.shapes[:1])) if ins.opcode == "copy-start" else _writes(module, ins))
    # XLA runs a fusion on every TensorCore of a megacore device (v4/v5p): the chip table is per core.
    mxu_rate = c.mxu_flops_per_s("int8" if work.dtype == "int8" else "bfloat16") * cores
    mxu_s = work.mxu_flops_bf16 / mxu_rate
    vpu_s = (work.vpu + work.trans * TRANSCENDENTAL_VPU_OPS) / (
        _clock_hz(c) * VPU_ELEMENT_OPS_PER_CYCLE * cores
    )
    hbm_s = nbytes / (c.hbm_bytes_per_s * cores * XLA_HBM_EFFICIENCY)
    if ins.opcode in COLLECTIVES:
        if c.ici_link_gbps:
            hbm_s = max(hbm_s, _hbm(ins.shapes) / (c.ici_link_gbps * 1e9))
            notes.append(f"collective: its output bytes over one ICI link at {c.ici_link_gbps:g} GB/s")
        else:
            notes.append(f"collective: no ICI bandwidth known for {c.name}, costed as HBM traffic only")
    tier: Literal["llo", "model"] = "model"
    fallback: str | None = None
    llo_s = None
    prog = llo.get(ins.name)
    kernel_prog = prog if prog is not None and prog.is_kernel else None
    if kernel_prog is not None:
        prog = None  # a Mosaic kernel's loop is one grid step: costed by _as_kernel below
    fixed_s = FUSION_OVERHEAD_US * 1e-6
    scalar = _is_scalar(ins)
    one = _is_one_element_copy(ins)
    # an op on one element (7p's s32[1] offsets and bounds) that the top-level program's bundles name: it
    # runs there, on the scalar unit, its operand's tile fetched by a DMA the TLP issues (read in its dump)
    inline = tlp is not None and _is_one_element(ins) and ins.name in tlp.annotated_ops
    if prog is not None and c.clock_ghz:
        bundles = _llo_bundles(prog)
        if bundles:
            llo_s = bundles / (c.clock_ghz * 1e9)
            tier = "llo"
            if not _waits_on_hbm(prog):  # VMEM/SMEM only: no DMA round trip to wait for
                fixed_s = 0.0
        else:
            fallback = "LLO read, but its loop's trip count was not found"
    elif prog is not None:
        fallback = f"LLO read, but {c.name} has no clock to turn bundles into time"
    elif kernel_prog is None and (scalar or one or ins.opcode in ASYNC_STARTS or inline):
        # Not a program: the top-level program does it inline (scalar unit, or a DMA it issues).
        vpu_s = 0.0
        if scalar:  # its operands are scalars the program holds in registers and SMEM: no HBM traffic
            nbytes, hbm_s, fixed_s = 0.0, 0.0, 0.0
        what = (
            "a scalar op"
            if scalar
            else "a one-element copy"
            if one
            else "a one-element op"
            if inline
            else "an async copy (a DMA)"
        )
        if tlp is not None:
            tier, fixed_s = "llo", 0.0  # an async DMA's round trip is hidden until its -done (see _overlap)
            notes.append(f"{what} the top-level program runs inline: no launch, its bundles counted there")
        else:  # model tier: an async copy charged whole, its round trip included, as if it did not overlap
            fallback = f"{what}: no launch, but no top-level program dumped to read it from"
    elif (
        kernel_prog is None and tlp is not None and nbytes == 0 and ins.name not in {n for n, _ in tlp.calls}
    ):
        # No code at all: the top-level program never runs it and it moves nothing (XLA's ConcatBitcast of
        # VMEM slices is an alias of their buffers).
        fixed_s, vpu_s, mxu_s, tier = 0.0, 0.0, 0.0, "llo"
        notes.append("no code: the top-level program never runs it and it moves no HBM bytes")
    elif kernel_prog is None:
        fallback = (
            "no LLO program of its own in the dump"
            if llo
            else "no LLO dump (compiled without libtpu's dump, or the backend was up before it was switched on)"
        )
    compute_s = max(mxu_s, llo_s if llo_s is not None else vpu_s)
    busy = max(compute_s, hbm_s)
    bound: Literal["compute", "memory", "overhead"] = (
        "overhead" if fixed_s > busy else ("compute" if compute_s >= hbm_s else "memory")
    )
    per_run = busy + fixed_s
    kernel = _as_kernel(ins, table, c, kernel_prog) if ins.opcode == "custom-call" else None
    if kernel is not None and kernel.tier == "llo" and kernel.estimated_time_us * 1e-6 <= busy:
        tier, fallback = "llo", None  # its compiled steps run under the roofline of its declared work
    elif kernel is not None and kernel.tier != "llo":
        fallback = "XLA's own Mosaic kernel matched no compiled program with a readable grid"
    if kernel is not None and kernel.estimated_time_us * 1e-6 > busy:
        # What XLA emitted runs as a gridded kernel: its own blocks, refetches and bundles per step, never
        # under the roofline of its declared work.
        busy = kernel.estimated_time_us * 1e-6
        nbytes = float(kernel.hbm_bytes_moved)
        hbm_s = nbytes / (c.hbm_bytes_per_s * cores)
        if kernel.tier == "llo":
            llo_s, tier, fallback = kernel.compute_time_us * 1e-6, "llo", None
        bound = "compute" if kernel.compute_time_us >= kernel.dma_time_us else "memory"
        per_run = busy + fixed_s
        grid = " x ".join(str(g) for g in kernel.grid)
        notes.append(
            f"XLA's own Mosaic kernel, costed as a pallas_call: grid {grid} ({kernel.steps} steps), its windows "
            f"moving {fmt_bytes(nbytes)} of HBM traffic"
            + (f", {kernel.bundles_per_step} bundles per step" if kernel.bundles_per_step else "")
        )
        notes += kernel.notes
    elif kernel is None and kernel_prog is not None and c.clock_ghz and _llo_bundles(kernel_prog):
        # A Mosaic program with no grid we could read (XLA's own ragged-dot metadata kernel): its bundles.
        llo_s = _llo_bundles(kernel_prog) / (c.clock_ghz * 1e9)
        compute_s = max(mxu_s, llo_s)
        busy, tier, fallback = max(compute_s, hbm_s), "llo", None
        fixed_s = fixed_s if _waits_on_hbm(kernel_prog) else 0.0
        per_run = busy + fixed_s
        bound = "overhead" if fixed_s > busy else ("compute" if compute_s >= hbm_s else "memory")
    elif kernel is None and kernel_prog is not None:
        fallback = "a Mosaic program whose grid and bundles could not be read"
    if fallback is None and tier == "model":
        fallback = "costed from its HLO (no program of its own was read)"
    if fallback is not None:
        tier = "model"
    return FusionCost(
        name=ins.name,
        opcode=ins.opcode,
        fusion_kind=ins.fusion_kind,
        op_names=work.op_names,
        source=work.sources,
        output_shapes=[str(s) for s in ins.shapes],
        flops=work.flops * count,
        vpu_ops=work.vpu * count,
        bytes_accessed=nbytes * count,
        transcendentals=work.trans * count,
        count=count,
        mxu_time_us=mxu_s * 1e6 * count,
        vpu_time_us=vpu_s * 1e6 * count,
        hbm_time_us=hbm_s * 1e6 * count,
        llo_time_us=llo_s * 1e6 * count if llo_s is not None else None,
        estimated_time_us=per_run * 1e6 * count,
        tier=tier,
        bound=bound,
        notes=notes,
        fallback=fallback,
    )


ASYNC_STARTS = {"copy-start", "slice-start"}


def _is_one_element_copy(ins: HloInstruction) -> bool:
    """A copy of one element (48k's bf16[1] bias re-laid out): where it has no program of its own, the
    top-level program moves it inline, one tile (1 KiB) charged at its bytes, no launch of its own."""
    return ins.opcode == "copy" and bool(ins.shapes) and all(math.prod(s.dims) == 1 for s in ins.shapes)


def _is_one_element(ins: HloInstruction) -> bool:
    """Every output one element (s32[1], pred[1]), not a loop or a kernel."""
    return (
        bool(ins.shapes)
        and all(math.prod(s.dims) == 1 for s in ins.shapes)
        and ins.opcode not in ("while", "custom-call", "fusion", "call", "conditional")
    )


def _is_scalar(ins: HloInstruction) -> bool:
    """Every output a scalar (a loop counter, a bound): run on the scalar unit, never a program of its own."""
    return (
        bool(ins.shapes)
        and all(not s.dims for s in ins.shapes)
        and ins.opcode not in ("while", "custom-call")
    )


def _waits_on_hbm(p: ProgramLLO) -> bool:
    """The program moves data between HBM and its core (it waits on at least one HBM DMA)."""
    return any("hbm" in d.kind for d in (*p.dmas_per_step, *p.dmas_outside_loop))


def _int_value(ins: HloInstruction | None, table: dict[str, HloInstruction]) -> int | None:
    """The integer a scalar constant (through copies) holds."""
    for _ in range(4):
        if ins is None:
            return None
        if ins.opcode == "constant" and ins.literal is not None:
            try:
                return int(ins.literal)
            except ValueError:
                return None
        if ins.opcode not in ("copy", "bitcast", "convert") or not ins.operands:
            return None
        ins = table.get(ins.operands[0])
    return None


def _trip_count(module: HloModule, ins: HloInstruction, table: dict[str, HloInstruction]) -> int | None:
    """A while loop's trip count: XLA's `known_trip_count`, else `i < N` in its condition from i's start."""
    cfg = ins.backend_config()
    n = (cfg.get("known_trip_count") or {}).get("n") if isinstance(cfg, dict) else None
    if n is not None:
        try:
            return int(n)
        except (TypeError, ValueError):
            pass
    cond, ctab, root = _called(module, ins, "condition")
    if cond is None:
        return None
    direction = re.search(r"direction=(\w+)", root.attrs) if root is not None else None
    if root is None or root.opcode != "compare" or not direction or len(root.operands) != 2:
        return None
    a, b = (ctab.get(o) for o in root.operands)
    if a is None or b is None or a.opcode != "get-tuple-element":
        return None
    bound = _int_value(b, ctab)
    idx = re.search(r"\bindex=(\d+)", a.attrs)
    init_tuple = table.get(ins.operands[0]) if ins.operands else None
    start = 0
    if (
        idx
        and init_tuple is not None
        and init_tuple.opcode == "tuple"
        and int(idx.group(1)) < len(init_tuple.operands)
    ):
        start = _int_value(table.get(init_tuple.operands[int(idx.group(1))]), table) or 0
    if bound is None:
        return None
    trips = {"LT": bound - start, "LE": bound - start + 1, "NE": bound - start}.get(direction.group(1))
    return trips if trips is not None and trips > 0 else None


class _Ctx:
    """What every level of the walk shares: the module, the chip, the dumped programs, the notes."""

    def __init__(self, module, c, cores, llo, notes, skip_kernels, budget, tlp):
        self.module, self.c, self.cores, self.llo, self.notes = module, c, cores, llo, notes
        self.skip_kernels, self.budget, self.tlp = skip_kernels, budget, tlp
        self.counts: dict[str, int] = {}  # instruction -> times it runs (while trips multiplied)
        self._twins: dict[tuple, ProgramLLO] | None = None

    def program_of(self, ins: HloInstruction) -> ProgramLLO | None:
        """The op's own program, or the one XLA compiled once for ops alike (two identical fusions, the two
        RMSNorms of a layer, share one program: the dump names it after one of them)."""
        if ins.name in self.llo or not self.llo:
            return self.llo.get(ins.name)
        if self._twins is None:
            self._twins = {}
            for comp in self.module.computations.values():
                for other in comp.instructions:
                    if other.name in self.llo:
                        self._twins.setdefault(_signature(self.module, other), self.llo[other.name])
        return self._twins.get(_signature(self.module, ins))


def _signature(module: HloModule, ins: HloInstruction) -> tuple:
    """What makes two ops one program: opcode, result shapes, and the fused body's ops and shapes."""
    body = tuple(
        (i.opcode, tuple(str(s) for s in i.shapes))
        for c in ins.calls
        if c in module.computations
        for i in module.computations[c].instructions
    )
    target = re.search(r'custom_call_target="([^"]*)"', ins.attrs)
    return (ins.opcode, tuple(str(s) for s in ins.shapes), body, target.group(1) if target else None)


def _cost_computation(ctx: _Ctx, comp: HloComputation, count: int, depth: int = 0) -> list[FusionCost]:
    module, notes = ctx.module, ctx.notes
    table = _symbols(comp)
    out: list[FusionCost] = []
    pending: dict[str, FusionCost] = {}  # async copies in flight: their DMA overlaps what runs before -done
    for ins in comp.instructions:
        op = ins.opcode
        ctx.counts[ins.name] = count
        if op.endswith("-done") and ins.operands and ins.operands[0] in pending:
            _overlap(pending.pop(ins.operands[0]), out, ctx.tlp is not None)
        if op in FREE_OPS or op.endswith("-done"):
            continue
        if ctx.skip_kernels and _holds_kernel(
            module, ins
        ):  # the caller costs the pallas_calls from their jaxpr
            if ctx.budget is None or ctx.budget[0] > 0:
                if ctx.budget is not None:
                    ctx.budget[0] -= 1
                continue
            notes.append(
                f"{ins.name}: a Mosaic kernel that no traced pallas_call accounts for, costed as an op here"
            )
        if op == "while" and depth < 6:
            trips = _trip_count(module, ins, table)
            if trips is None:
                notes.append(f"{ins.name}: while loop with no known trip count, its body costed once")
            body = re.search(r"\bbody=%([\w.\-]+)", ins.attrs)
            if body and body.group(1) in module.computations:
                out += _cost_computation(
                    ctx, module.computations[body.group(1)], count * (trips or 1), depth + 1
                )
            continue
        if op == "conditional" and depth < 6:
            branches = [
                _cost_computation(ctx, module.computations[b], count, depth + 1)
                for b in ins.calls
                if b in module.computations
            ]
            if branches:
                out += max(branches, key=lambda fs: sum(f.estimated_time_us for f in fs))
                notes.append(f"{ins.name}: conditional costed as its slowest branch")
            continue
        if op == "call" and depth < 6:
            for b in ins.calls:
                if b in module.computations:
                    out += _cost_computation(ctx, module.computations[b], count, depth + 1)
            continue
        llo = ctx.llo
        twin = ctx.program_of(ins) if ins.name not in llo else None
        if twin is not None:
            llo = {**llo, ins.name: twin}
        cost = _cost_op(module, ins, table, ctx.c, ctx.cores, llo, count, ctx.tlp)
        if twin is not None:
            cost.notes.append(f"runs the program XLA compiled once for it and {twin.program} (alike)")
        out.append(cost)
        if op in ASYNC_STARTS:
            pending[ins.name] = cost
    return out


def _overlap(start: FusionCost, out: list[FusionCost], scheduled: bool) -> None:
    """An async copy's DMA runs beside the ops the schedule puts between its start and done: only the part
    of its transfer they do not cover is charged (XLA's HLO is scheduled: instruction order is run order).
    Only when the top-level program that issues it was read (`scheduled`); the model tier charges it whole,
    as if it did not overlap."""
    i = next((k for k, f in enumerate(out) if f is start), None)
    if i is None:
        return
    if not scheduled:
        start.notes.append("charged whole, as if it did not overlap (no top-level program read: model tier)")
        return
    # HBM is shared: the DMA hides only under the time those ops do not spend on HBM themselves.
    beside = sum(max(0.0, f.estimated_time_us - f.hbm_time_us) for f in out[i + 1 :])
    if beside <= 0:
        return
    exposed = max(0.0, start.estimated_time_us - beside)
    start.notes.append(
        f"{start.estimated_time_us - exposed:.3g} us of it hidden under the non-HBM time of {len(out) - i - 1} op(s)"
    )
    start.estimated_time_us = exposed
    if exposed <= 0:
        start.bound = "overhead"


def _tlp_us(tlp: ProgramLLO, counts: dict[str, int], c: ChipSpec, notes: list[str]) -> float | None:
    """The top-level program's own time: its bundles (launch, loop control, scalar ops, DMA issue) at the
    clock, each of its loops' bundles times the runs of the HLO ops it calls (a while body's trips)."""
    if not c.clock_ghz or not tlp.total_bundles:
        return None
    n = tlp.straight_line_bundles + tlp.loop_bundles
    n = n or tlp.total_bundles
    mult = [1] * n
    for lp in sorted(tlp.loops, key=lambda x: x.bundles, reverse=True):  # inner loops last: they win
        inside = [counts.get(name, 0) for name, i in tlp.calls if lp.start <= i < lp.start + lp.bundles]
        runs = max(inside, default=0)
        if not runs:
            notes.append(
                f"a loop of {lp.bundles} bundles in the top-level program calls no op (e.g. the copy of a may-alias "
                "parameter it skips when the caller donates it): counted once"
            )
            continue
        for k in range(lp.start, min(n, lp.start + lp.bundles)):
            mult[k] = runs
    return sum(mult) / (c.clock_ghz * 1e9) * 1e6


def _as_kernel(ins: HloInstruction, table: dict[str, HloInstruction], c: ChipSpec, prog: ProgramLLO | None):
    """A Mosaic custom call's CallEstimate from its own grid, windows and (if dumped) its LLO, or None."""
    call = kernel_call(ins, table)
    return estimate_call(call, c, llo=prog) if call is not None else None


def is_mosaic_kernel(ins: HloInstruction) -> bool:
    """A pallas_call as XLA holds it: a custom call to Mosaic that jax lowered (not one of XLA's own Mosaic
    kernels, such as its ragged dot, which belong to the XLA side).

    jax's lowering (jax._src.tpu_custom_call) always writes the kernel as MLIR bytecode and says so with
    `serialization_format` in the backend config; XLA's own kernels carry MLIR text and no such key. The
    name stack is not enough: a pallas_call traced inside a library's own scope (tokamax's ragged dot) has
    an op_name without "pallas_call", and one compiled with its metadata stripped has none."""
    if ins.opcode != "custom-call" or 'custom_call_target="tpu_custom_call"' not in ins.attrs:
        return False
    if "pallas_call" in (ins.op_name or ""):
        return True
    cfg = ins.backend_config()
    return "serialization_format" in ((cfg.get("custom_call_config") or {}) if isinstance(cfg, dict) else {})


def _holds_kernel(module: HloModule, ins: HloInstruction) -> bool:
    """A pallas_call's custom call, or a fusion XLA made of one and the producers of its inputs
    (allow_input_fusion): the kernel reads what they compute in its own DMAs."""
    if is_mosaic_kernel(ins):
        return True
    return ins.opcode == "fusion" and any(
        is_mosaic_kernel(i)
        for c in ins.calls
        if c in module.computations
        for i in module.computations[c].instructions
    )


def cost_hlo_text(
    text: str,
    chip: str | ChipSpec,
    llo_programs: Sequence[ProgramLLO] | None = None,
    *,
    skip_kernels: bool = False,
    kernels: int | None = None,
) -> FusionTable:
    """The FusionTable of a compiled program's HLO text (see `cost_fusions`)."""
    c = chip if isinstance(chip, ChipSpec) else get_chip(chip)
    cores = cores_per_device(c.name)
    module = parse_hlo(text)
    notes: list[str] = []
    entry = module.entry_computation
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    llo = _llo_by_name(llo_programs)
    budget = [kernels] if kernels is not None else None
    tlp = top_level_program(llo_programs, module)
    ctx = _Ctx(module, c, cores, llo, notes, skip_kernels, budget, tlp)
    fusions = _cost_computation(ctx, entry, 1)
    if skip_kernels:
        notes.append("the program's Mosaic kernels (pallas_calls) are left out: costed from their own jaxpr")
    flops = sum(f.flops for f in fusions)
    nbytes = sum(f.bytes_accessed for f in fusions)
    launch_us = _tlp_us(tlp, ctx.counts, c, notes) if tlp is not None else None
    program_tier: Literal["llo", "model"] = "llo" if launch_us is not None else "model"
    if launch_us is None:
        launch_us = PROGRAM_OVERHEAD_US
    total = sum(f.estimated_time_us for f in fusions) + launch_us
    tiers = {f.tier for f in fusions} | {program_tier}
    tier: Literal["llo", "model"] = "llo" if tiers == {"llo"} else "model"
    fallbacks = [f"{f.name} ({f.opcode}): {f.fallback}" for f in fusions if f.tier == "model"]
    if program_tier == "model":
        fallbacks.append(
            f"the program's launch: no top-level program (TLP) in the dump, a fixed {PROGRAM_OVERHEAD_US:g} us"
        )
    if tier == "llo":
        note = (
            f"llo: every op's compute from the compiler's schedule at {c.clock_ghz} GHz, the launch and loop "
            "control from the top-level program's"
        )
    elif "llo" in tiers:
        shown = "; ".join(fallbacks[:3]) + (f"; and {len(fallbacks) - 3} more" if len(fallbacks) > 3 else "")
        note = f"model: {len(fallbacks)} op(s) fell back to the HLO model ({shown})"
    elif llo_programs and not c.clock_ghz:
        note = f"model: LLO dump read, but {c.name} has no clock to turn bundles into time"
    else:
        note = "model: flops and bytes from the HLO of each fusion" + (
            "" if llo_programs else " (no LLO dump)"
        )
    if module.skipped_lines:
        notes.append(f"{module.skipped_lines} HLO lines not understood (skipped)")
    # The old baseline as it was: the roofline of the program's totals at one core's peak.
    whole_us = max(flops / c.peak_bf16_flops_per_s, nbytes / c.hbm_bytes_per_s) * 1e6
    return FusionTable(
        chip=c.name,
        fusions=fusions,
        program_overhead_us=launch_us,
        program_tier=program_tier,
        fallbacks=fallbacks,
        total_us=total,
        tier=tier,
        note=note,
        whole_program_roofline_us=whole_us,
        flops=flops,
        bytes_accessed=nbytes,
        assumptions=[
            f"each top-level op of the compiled HLO runs alone: time = max(MXU, VPU or LLO bundles, HBM bytes at "
            f"{XLA_HBM_EFFICIENCY:.0%} of {c.hbm_gbps:g} GB/s per core) + {FUSION_OVERHEAD_US} us",
            (
                f"the launch: the top-level program's own bundles ({launch_us:.3g} us), once per program; ops it "
                "runs inline (scalar ops, async copies) are no launch"
                if program_tier == "llo"
                else f"{PROGRAM_OVERHEAD_US} us per program launch ({FIT_NOTES})"
            ),
            f"an op whose own program waits on an HBM DMA adds {FUSION_OVERHEAD_US} us (one DMA round trip); "
            "one that only touches VMEM/SMEM adds nothing",
            "an async copy (copy-start) is charged only the part of its transfer that the compute and fixed time "
            "(not the HBM time: bandwidth is shared) of the ops scheduled before its copy-done do not cover",
            "an in-place dynamic-update-slice or scatter (a fusion's output aliased to its operand: a donated KV cache) "
            "moves only its updates; a copy XLA makes of a buffer the caller did not donate is costed as its own op",
            "buffers XLA placed in VMEM (S(1)) cost no HBM bytes",
            "f32 matmuls at DEFAULT precision run as one bf16 MXU pass (XLA on TPU); HIGHEST as 6",
            f"megacore ({c.name}): {cores} TensorCore(s) per device, XLA splits every fusion across them",
            *notes,
        ],
    )


def top_level_program(
    programs: Sequence[ProgramLLO] | None, module: HloModule | None = None
) -> ProgramLLO | None:
    """The module's top-level program (libtpu names it TLP): it runs the others as inlined calls. With
    several (a dump folder shared by compiles), the one that calls most of this module's instructions."""
    tlps = [p for p in programs or () if p.program == "TLP" and not p.is_kernel]
    if len(tlps) <= 1 or module is None:
        return tlps[0] if tlps else None
    names = {i.name for comp in module.computations.values() for i in comp.instructions}
    return max(tlps, key=lambda p: sum(n in names for n, _ in p.calls))


def program_launch_us(programs: Sequence[ProgramLLO] | None, chip: str | ChipSpec) -> tuple[float, str]:
    """A program's launch on the device: its top-level program's straight-line bundles at the clock (tier
    llo), else the fixed PROGRAM_OVERHEAD_US (model); with the sentence that says which."""
    c = chip if isinstance(chip, ChipSpec) else get_chip(chip)
    tlp = top_level_program(programs)
    if tlp is not None and c.clock_ghz and tlp.total_bundles:
        us = (tlp.straight_line_bundles or tlp.total_bundles) / (c.clock_ghz * 1e9) * 1e6
        return (
            us,
            f"the launch: the top-level program's {tlp.straight_line_bundles or tlp.total_bundles} bundles",
        )
    return (
        PROGRAM_OVERHEAD_US,
        f"a fixed {PROGRAM_OVERHEAD_US:g} us per program (launch), as for XLA programs",
    )


def cost_fusions(
    compiled,
    chip: str | ChipSpec,
    llo_programs: Sequence[ProgramLLO] | None = None,
    *,
    skip_kernels: bool = False,
    kernels: int | None = None,
) -> FusionTable:
    """Cost a jax `Compiled` for a TPU target fusion by fusion (its HLO text; the LLO where dumped).

    `compiled` may also be the HLO text itself. `llo_programs`: the programs libtpu dumped for this
    compile (`llo_dump.compile_with_dump`); a fusion whose program is there and whose loop trip count
    is found is costed from the compiler's schedule (tier `llo`) on a chip with a clock. `skip_kernels`:
    leave out the pallas_calls (the caller costs them from their jaxpr), at most `kernels` of them (the
    calls it traced): a Mosaic kernel beyond those (one built without pallas_call) is costed here.
    """
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    return cost_hlo_text(text, chip, llo_programs, skip_kernels=skip_kernels, kernels=kernels)
