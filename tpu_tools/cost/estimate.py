"""A static TPU performance estimate read from the kernel itself, always labeled `estimate`.

Interpret-mode timings on CPU say nothing about TPU speed, and XLA's cost analysis of an interpreted
`pallas_call` counts one grid step. So we model the Pallas TPU pipeline from what the kernel declares
(grid, BlockSpecs, scratch, `pl.CostEstimate`): walk the grid in order, find which blocks are
re-fetched or written back at each step, and time each step as max(compute, DMA) + a fixed overhead,
plus a non-overlapped prologue (first fetch) and epilogue (last writeback). Chips come from `chips.py`.

Two tiers, always named in the result: `llo` takes each step's compute from the compiler's own final
schedule (bundles in the grid loop / the chip's clock, from a libtpu LLO dump, see `llo_dump.py`);
`model` infers it from the blocks and the MXU/VPU rates. Both add the work outside the kernels
(`jaxpr_cost.py`: a kernel that moves its matmul into `jnp` pays for it), and both ignore a declared
`pl.CostEstimate` that is far below what the kernel body computes.

This is a model, not a measurement: it ranks block choices and explains them; a profile is the truth.
Every constant below says where it comes from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.block_schedule import bounded_grid
from maxkernel.tpu_tools.cost.call_estimate import (
    STEP_OVERHEAD_US,
    TRANSCENDENTAL_VPU_OPS,
    UNDER_DECLARED_FRACTION,
    VPU_ELEMENT_OPS_PER_CYCLE,
    VPU_OPS_PER_ELEMENT,
    CallEstimate,
    MiB,
    chip_spec,
    estimate_call,
    fmt_bytes,
    step_bundles_text,
    vpu_ops_per_s,
)
from maxkernel.tpu_tools.cost.data_work import CallData
from maxkernel.tpu_tools.cost.fusions import FusionTable, program_launch_us
from maxkernel.tpu_tools.cost.jaxpr_cost import ProgramCost
from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO
from maxkernel.tpu_tools.hardware.chips import ChipSpec
from maxkernel.tpu_tools.hardware.megacore import cores_per_device, parallel_prefix
from maxkernel.tpu_tools.problem.pallas_info import PallasCallInfo
from maxkernel.tpu_tools.reports import Failure

__all__ = [
    "CallEstimate",
    "RooflineEstimate",
    "StaticEstimate",
    "default_scoped_vmem_bytes",
    "estimate_pallas",
    "roofline",
]

# Default scoped-VMEM limit Mosaic compiles a kernel against when `vmem_limit_bytes` is not given.
# Inferred from public "Scoped allocation with size ... and limit 16.00M / 32.00M exceeded scoped vmem
# limit" compile errors (16 MiB on v4/v5e/v5p, 32 MiB on v6e); 7x assumed equal to v6e. The
# compile-only check (tier B) is the real verdict; this only flags the risk.
DEFAULT_SCOPED_VMEM_BYTES = {4: 16 * MiB, 5: 16 * MiB, 6: 32 * MiB, 7: 32 * MiB}


class RooflineEstimate(BaseModel):
    kind: Literal["estimate"] = "estimate"
    chip: str
    flops: float
    bytes_accessed: float
    compute_time_us: float
    memory_time_us: float
    time_us: float
    bound: Literal["compute", "memory"]
    arithmetic_intensity: float = Field(description="flops per byte")


class OutsideKernelCost(BaseModel):
    """The XLA ops around the pallas_calls: fusion by fusion when the program was compiled for the chip
    (`basis` fusions), else the roofline of their counted work (`basis` roofline)."""

    basis: Literal["fusions", "roofline"] = "roofline"
    time_us: float
    flops: float
    bytes: float
    ops: list[str] = Field(default_factory=list, description="'primitive: flops' of the biggest ops")
    flops_share: float = Field(description="outside matmul/conv flops / all matmul/conv flops")


class StaticEstimate(BaseModel):
    kind: Literal["estimate"] = "estimate"
    tier: Literal["llo", "model"] = Field(
        default="model", description="llo: compute from the compiler's schedule; model: from the blocks"
    )
    tier_note: str = ""
    chip: str
    estimated_time_us: float
    bound: Literal["compute", "memory", "overhead"]
    roofline_time_us: float
    fraction_of_roofline: float = Field(description="roofline / estimate, <= 1")
    hbm_bytes_moved: int
    flops: float
    steps: int
    vmem_bytes_needed: int
    vmem_capacity_bytes: int
    vmem_scoped_limit_bytes: int = Field(description="kernel's vmem_limit_bytes, else the chip default")
    fits_vmem: bool = Field(description="vmem_bytes_needed <= physical VMEM")
    above_scoped_vmem_limit: bool
    padding_waste_fraction: float
    per_call: list[CallEstimate]
    outside_kernel: OutsideKernelCost | None = None
    xla_fusions: FusionTable | None = Field(
        default=None, description="plain JAX: the TPU-compiled program costed fusion by fusion"
    )
    ignored_cost_estimates: list[str] = Field(
        default_factory=list, description="pl.CostEstimates ignored as far below the counted flops"
    )
    launch_us: float | None = Field(
        default=None,
        description="the program's launch inside estimated_time_us (its top-level program's bundles)",
    )
    reason: str
    assumptions: list[str]


def default_scoped_vmem_bytes(chip: str | ChipSpec) -> int:
    c = chip_spec(chip)
    return DEFAULT_SCOPED_VMEM_BYTES.get(c.generation, 16 * MiB)


def roofline(flops: float, bytes_accessed: float, chip: str | ChipSpec, cores: int = 1) -> RooflineEstimate:
    """Time = max(flops / peak bf16, bytes / HBM bandwidth), over `cores` TensorCores (megacore: 2)."""
    c = chip_spec(chip)
    t_c = flops / (c.peak_bf16_flops_per_s * cores) * 1e6
    t_m = bytes_accessed / (c.hbm_bytes_per_s * cores) * 1e6
    return RooflineEstimate(
        chip=c.name,
        flops=float(flops),
        bytes_accessed=float(bytes_accessed),
        compute_time_us=t_c,
        memory_time_us=t_m,
        time_us=max(t_c, t_m),
        bound="compute" if t_c >= t_m else "memory",
        arithmetic_intensity=flops / bytes_accessed if bytes_accessed else math.inf,
    )


# ---------------------------------------------------------------------------------------------------
# The public estimate

ASSUMPTIONS = [
    f"a grid step takes max({STEP_OVERHEAD_US} us, compute, DMA) (JAX Pallas TPU guides; v5e 128^3 matmul)",
    "grid runs in row-major order on one TensorCore; on megacore chips (v4, v5p) the leading parallel axes "
    "are split across both TensorCores and the busiest core's steps set the time (megacore.py)",
    "an input block is fetched only when its block index changes between consecutive steps; an output "
    "block is written back when its index changes and at the end",
    "DMA of step t+1 inputs / step t-1 outputs overlaps step t compute; first fetch and last writeback do not",
    "DMAs move whole (sublane,128) tiles: (8,128) 32-bit, (16,128) 16-bit, (32,128) 8-bit",
    "MXU: each dot at the peak of the dtype it runs in, over the passes its precision takes (dot_precision.py: "
    "in a kernel, f32 operands one f32 pass at DEFAULT, six at HIGHEST, f32 = bf16 / chips.F32_MXU_SLOWDOWN, "
    "calibrated on v5e; operands cast to bf16 one bf16 pass; in XLA, f32 DEFAULT one bf16 pass, HIGH 3, "
    "HIGHEST 6), scaled by how fully blocks fill the MXU",
    "tier llo: a step's compute = the compiler's grid-loop bundles / clock (f32 matmuls: at least the f32 "
    "MXU time); the bundles outside the loop run once; a loop in the kernel body (fori_loop, scan, while) "
    "is charged its bundles x its trip count (the dump's, else the jaxpr's, else for a while loop its mean "
    "trips on the reference's inputs; unknown: once, named, with the counted matmul work as a floor)",
    "data-dependent work (a run-time grid axis, prefetch-indexed blocks, pl.when on a prefetched value, while "
    "loops) from the reference's own inputs at the target size, their small integer tables run through the "
    "program and the kernel body's scalar part, and from the program's own constant tables (built before the "
    "kernel from literals, iota and shapes, at most 1M elements); where no values are had, the traced bounds "
    "(a ceiling)",
    f"VPU: {VPU_ELEMENT_OPS_PER_CYCLE} element-ops/cycle at the clock implied by the MXU peak; "
    f"{VPU_OPS_PER_ELEMENT} ops per element touched; MXU and VPU overlap",
    "VMEM need = buffer_count (default 2; 1 for a single-step kernel or a block whose index never changes) x "
    "each pipelined VMEM block + VMEM scratch, tile-padded (the compiler's verdict, tier llo, is the truth)",
    "a single-buffered block (pl.Buffered(1)) cannot be prefetched: its transfers add to the step time",
    "pl.when branches: a predicate of the program ids is evaluated over the grid; tier llo: the compiled "
    "loop's pl.when bodies (the regions directly in the pipeline's stage guard, paired in order with the "
    "body's top-level conds) are each charged their bundles on the share of steps that take them, the rest "
    "of the loop every step; where they do not pair, a step is charged the loop's bundles times the "
    "expected share of its body's work (each branch weighted by its counted MXU, VPU and EUP time); the "
    "f32 MXU floor comes from the per-branch flops, never scaled again; a predicate that reads memory is "
    "charged every step",
    "default scoped VMEM limit 16 MiB (v4/v5e/v5p), 32 MiB (v6e, 7x assumed): inferred from compiler errors",
    "XLA ops around the pallas_calls: roofline of their matmul/conv flops, element-ops and the bytes of "
    "every value they touch (jaxpr_cost.py), added to the kernels' time",
    f"a declared pl.CostEstimate under {UNDER_DECLARED_FRACTION:.0%} of the kernel body's counted flops is ignored",
]


def _plain_estimate(c: ChipSpec, flops: float, nbytes: float) -> StaticEstimate:
    rl = roofline(flops, nbytes, c, cores_per_device(c.name))  # XLA splits its work over a megacore's cores
    rate = (
        f"{fmt_bytes(nbytes)} at {c.hbm_gbps:.0f} GB/s"
        if rl.bound == "memory"
        else f"{flops / 1e9:.3g} GFLOP at {c.peak_bf16_tflops:.0f} TFLOP/s"
    )
    scoped = default_scoped_vmem_bytes(c)
    return StaticEstimate(
        tier_note="model: no pallas_call, the roofline of the program's flops and bytes",
        chip=c.name,
        estimated_time_us=rl.time_us,
        bound=rl.bound,
        roofline_time_us=rl.time_us,
        fraction_of_roofline=1.0,
        hbm_bytes_moved=int(nbytes),
        flops=float(flops),
        steps=0,
        vmem_bytes_needed=0,
        vmem_capacity_bytes=c.vmem_bytes,
        vmem_scoped_limit_bytes=scoped,
        fits_vmem=True,
        above_scoped_vmem_limit=False,
        padding_waste_fraction=0.0,
        per_call=[],
        reason=f"no pallas_call: roofline of the XLA cost analysis, {rl.bound}-bound ({rate})",
        assumptions=["no pallas_call in the program: estimate = roofline of its flops and I/O bytes"],
    )


def outside_cost(program: ProgramCost, c: ChipSpec) -> OutsideKernelCost | None:
    """Roofline time of the XLA ops around the kernels (None when there are none that cost anything)."""
    if not (program.outside_flops or program.outside_vpu_ops or program.outside_bytes):
        return None
    if program.outside_mxu_pass_flops:  # each dot at XLA's passes for its precision (f32 DEFAULT: one bf16)
        mxu_s = sum(f / c.mxu_flops_per_s(d) for d, f in program.outside_mxu_pass_flops.items())
    else:
        mxu_s = program.outside_flops / c.mxu_flops_per_s(program.outside_matmul_dtype or "bfloat16")
    vpu_s = (
        program.outside_vpu_ops + program.outside_transcendentals * TRANSCENDENTAL_VPU_OPS
    ) / vpu_ops_per_s(c)
    mem_s = program.outside_bytes / c.hbm_bytes_per_s
    inside = sum(f for f in program.kernel_flops_per_step)  # per step: only used for the share's sign
    total = program.outside_flops + inside
    return OutsideKernelCost(
        time_us=max(mxu_s, vpu_s, mem_s) * 1e6,
        flops=program.outside_flops,
        bytes=program.outside_bytes,
        ops=[f"{o.primitive}: {o.flops:.3g} flops x{o.count}" for o in program.outside_ops[:5]],
        flops_share=program.outside_flops / total if total else 0.0,
    )


def _outside_from_fusions(table: FusionTable, program: ProgramCost | None) -> OutsideKernelCost:
    """The XLA ops beside the kernels, each fusion bound on its own (the program's launch is counted once,
    by the caller)."""
    inside = sum(program.kernel_flops_per_step) if program is not None else 0.0
    total = table.flops + inside
    top = table.top(5)
    return OutsideKernelCost(
        basis="fusions",
        time_us=sum(f.estimated_time_us for f in table.fusions),
        flops=table.flops,
        bytes=table.bytes_accessed,
        ops=[f"{f.name} ({f.fusion_kind or f.opcode}): {f.estimated_time_us:.3g} us, {f.bound}" for f in top],
        flops_share=table.flops / total if total else 0.0,
    )


def _outside_model_ops(outside: OutsideKernelCost | None, table: FusionTable | None) -> list[str]:
    """The ops beside the kernels that were not costed from the compiler's schedule ('name (opcode): why'):
    each fallback of the fusion table, or the whole jaxpr count where no compiled HLO was read."""
    if outside is None or outside.time_us <= 0:
        return []
    if table is None:
        return [f"{len(outside.ops)} op kinds counted from the jaxpr (no compiled HLO read)"]
    if outside.basis != "fusions":  # the compiled program has no op for the work the jaxpr counts beside them
        return [
            f"{len(outside.ops)} op kinds the jaxpr counts, with no op of their own in the compiled program"
        ]
    return [f"{f.name} ({f.opcode}): {f.fallback}" for f in table.fusions if f.tier == "model"]


def _with_data(
    calls: Sequence[PallasCallInfo],
    scalar_prefetch: Sequence[Sequence[Any] | None] | None,
    data: Sequence[CallData | None] | None,
) -> tuple[list[PallasCallInfo], list[Sequence[Any] | None], list[list[str]]]:
    """Each call with its run-time grid axes at the values the inputs give, its prefetch values, and a note
    saying which: the inputs' values, or (none to be had) the bound kept as a ceiling."""
    out, prefetch, notes = [], [], []
    for i, call in enumerate(calls):
        d = data[i] if data and i < len(data) else None
        pre = scalar_prefetch[i] if scalar_prefetch and i < len(scalar_prefetch) else None
        if pre is None and d is not None and d.prefetch_known:
            pre = d.prefetch
        dynamic = any(g is None for g in call.grid)
        said: list[str] = []
        if dynamic and d is not None and d.grid and all(g is not None for g in d.grid):
            bound, _ = bounded_grid(call)
            said.append(
                f"{call.kernel_name}: grid {tuple(d.grid)} at run time, from the inputs' values (its traced "
                f"bound {bound})"
            )
            call = call.model_copy(update={"grid": tuple(d.grid)})
        elif (dynamic or call.num_scalar_prefetch) and (d is None or not d.prefetch_known or dynamic):
            why = (
                "no input values were had (an abstract-shape caller, or a reference with no small integer "
                "inputs)"
            )
            if d is not None and d.from_inputs:
                why = "the inputs' values do not decide its scalar-prefetch operands or run-time grid"
            elif d is not None:
                why += " and its scalar-prefetch operands or run-time grid are not constants of the program"
            said.append(
                f"{call.kernel_name}: {why}: its run-time grid, prefetch-indexed blocks, branches and loops "
                "are costed at their bounds, a ceiling"
            )
        elif call.num_scalar_prefetch and d is not None and not d.from_inputs:
            said.append(
                f"{call.kernel_name}: its scalar-prefetch operands are constants of the program (computed before "
                "the kernel from literals, iota and shapes, or baked in), evaluated: its prefetch-indexed blocks, branches "
                "and loops follow their values"
            )
        if d is not None and d.counts is not None and not d.counts.partial:
            on = "the inputs' values" if d.from_inputs else "its constant prefetch tables"
            said.append(
                f"{call.kernel_name}: its body's branches and while loops counted over the {d.counts.steps} "
                f"grid steps run on {on}"
            )
        said += [f"{call.kernel_name}: {n}" for n in (d.notes if d is not None else [])]
        out.append(call)
        prefetch.append(pre)
        notes.append(said)
    return out, prefetch, notes


# A grid axis known only at run time compiles to this bound (e.g. megablox gmm's m-tile count).
DYNAMIC_BOUND = 2**31 - 1


def grids_pair(
    traced: Sequence[int | None], compiled: Sequence[int], dimension_semantics, cores: int
) -> bool:
    """Whether a compiled kernel's grid is the traced one: equal, or a dynamic axis on either side, or on a
    megacore chip a leading parallel axis cut to one core's share (ceil(n / cores))."""
    if not compiled or not traced:
        return True
    if len(compiled) != len(traced):
        return False
    n_par = parallel_prefix(dimension_semantics) if cores > 1 else 0
    for i, (t, k) in enumerate(zip(traced, compiled, strict=True)):
        if t is None or k >= DYNAMIC_BOUND or t == k:
            continue
        if i < n_par and k == -(-int(t) // cores):
            continue
        return False
    return True


_MAX_REORDERED = 6  # calls whose dump orders are searched: 720 orders at most


def match_kernels(
    calls: Sequence[PallasCallInfo], programs: Sequence[ProgramLLO], chip: str | None = None
) -> list[ProgramLLO | None]:
    """Pair each pallas_call with its compiled kernel program: by name where every call's name is on one
    program whose grid pairs (grids_pair; a staged module names each stage's kernel apart), else in order
    when every grid pairs, else the one order of the dump that pairs them all. The dump's order is not always the trace's (9p's
    expert: its down projection's kernel came first); where several orders pair, the in-order pairing stays."""
    kernels = [p for p in programs if p.is_kernel]
    if len(kernels) < len(calls):
        return _match_shared(calls, kernels, chip)
    if len(kernels) != len(calls):
        return [None] * len(calls)
    cores = cores_per_device(chip)
    fits = [
        [grids_pair(call.grid, prog.iteration_bounds, call.dimension_semantics, cores) for prog in kernels]
        for call in calls
    ]
    by_name = [
        [j for j, prog in enumerate(kernels) if fits[i][j] and _named(call, prog)]
        for i, call in enumerate(calls)
    ]
    if all(len(js) == 1 for js in by_name) and len({js[0] for js in by_name}) == len(calls):
        return [kernels[js[0]] for js in by_name]  # every call's own name on one program whose grid pairs
    in_order = [prog if fits[i][i] else None for i, prog in enumerate(kernels)]
    if all(p is not None for p in in_order):
        return in_order
    if len(calls) > _MAX_REORDERED:
        return in_order
    pairing = (
        o for o in itertools.permutations(range(len(kernels))) if all(fits[i][j] for i, j in enumerate(o))
    )
    orders = list(itertools.islice(pairing, 2))  # a second one is enough to say it is ambiguous
    if len(orders) == 1:
        return [kernels[j] for j in orders[0]]
    # several orders pair by grid (two passes over one array share theirs): the one order in which every
    # program carries its call's kernel name, as Mosaic names them (`offline_colstats_pass1.1`)
    named = [
        o
        for o in itertools.permutations(range(len(kernels)))
        if all(fits[i][j] and _named(calls[i], kernels[j]) for i, j in enumerate(o))
    ]
    return [kernels[j] for j in named[0]] if len(named) == 1 else in_order


def _match_shared(
    calls: Sequence[PallasCallInfo], kernels: Sequence[ProgramLLO], chip: str | None
) -> list[ProgramLLO | None]:
    """Fewer kernel programs than calls: the compiler keeps one program for identical kernels (a model's layers
    calling the same kernel on the same shapes). Calls alike in everything but where they sit in the program
    share one; when those classes are as many as the programs, they pair as distinct calls would."""
    classes: dict[str, int] = {}
    of_call = [classes.setdefault(_kernel_key(c), len(classes)) for c in calls]
    if len(classes) != len(kernels):
        return [None] * len(calls)
    firsts = [calls[of_call.index(k)] for k in range(len(classes))]
    paired = match_kernels(firsts, kernels, chip)
    return [paired[k] for k in of_call]


def _kernel_key(call: PallasCallInfo) -> str:
    """What makes two calls one compiled kernel: all but the call's place in the traced program."""
    return call.model_dump_json(exclude={"path"})


def _named(call: PallasCallInfo, prog: ProgramLLO) -> bool:
    """The compiled program is named for the call's kernel (`<kernel name>` or `<kernel name>.<n>`)."""
    name = call.kernel_name
    return bool(name) and (prog.program == name or prog.program.startswith(name + "."))


def estimate_pallas(
    calls: Sequence[PallasCallInfo],
    chip: str | ChipSpec,
    *,
    total_flops: float | None = None,
    total_bytes: float | None = None,
    scalar_prefetch: Sequence[Sequence[Any] | None] | None = None,
    program: ProgramCost | None = None,
    llo: Sequence[ProgramLLO] | None = None,
    llo_note: str | None = None,
    outside_fusions: FusionTable | None = None,
    data: Sequence[CallData | None] | None = None,
) -> StaticEstimate:
    """Static estimate of the candidate's whole program on `chip` (never faster than the roofline).

    total_flops: the candidate's flops (e.g. the task's get_flops) when a kernel gives no CostEstimate
    and is not a recognizable matmul; with no calls, total_flops/total_bytes (XLA cost analysis) give
    the roofline estimate. scalar_prefetch: per call, the prefetch operand values, if known.
    program: the jaxpr's counted work (kernel bodies + ops outside them); llo: the compiled programs
    from an LLO dump (tier `llo` for each call matched to its kernel), llo_note: why there is none.
    outside_fusions: the compiled program's XLA ops with its kernels left out (fusions.cost_fusions,
    skip_kernels): when given, the work outside the kernels is costed fusion by fusion, as the XLA baseline
    is, instead of by the roofline of the jaxpr's count. data: per call, its run-time grid and prefetch
    values from the inputs' values (data_work.call_data; `program` should be counted with the same data):
    the steps that really run replace the bounds.
    """
    c = chip_spec(chip)
    if not calls:
        if total_flops is None or total_bytes is None:
            raise ValueError("no pallas_call found: pass total_flops and total_bytes (XLA cost analysis)")
        return _plain_estimate(c, total_flops, total_bytes)

    share = total_flops / len(calls) if total_flops is not None else None
    body = (
        program.kernel_flops_per_step
        if program and len(program.kernel_flops_per_step) == len(calls)
        else None
    )
    branches = (
        program.kernel_branches
        if program and len(program.kernel_branches) == len(calls)
        else [None] * len(calls)
    )
    loops = (
        program.kernel_loop_trips
        if program and len(program.kernel_loop_trips) == len(calls)
        else [None] * len(calls)
    )
    mxu_passes = (
        program.kernel_mxu_pass_flops
        if program and len(program.kernel_mxu_pass_flops) == len(calls)
        else [None] * len(calls)
    )
    matched = match_kernels(calls, llo, c.name) if llo else [None] * len(calls)
    calls, prefetch, data_notes = _with_data(calls, scalar_prefetch, data)
    per = [
        estimate_call(
            call,
            c,
            share,
            prefetch[i],
            body[i] if body else None,
            matched[i],
            branches[i],
            loops[i],
            mxu_passes[i],
        )
        for i, call in enumerate(calls)
    ]
    for p, extra in zip(per, data_notes, strict=True):
        p.notes = extra + p.notes
    flops = sum(p.flops for p in per)
    min_bytes = sum(p.min_hbm_bytes for p in per)
    # The lower bound: over both TensorCores when some kernel splits its grid across a megacore's cores.
    rl = roofline(flops, min_bytes, c, max(p.cores for p in per))
    est = sum(p.estimated_time_us for p in per)
    notes = [n for p in per for n in p.notes]
    clamped = est < rl.time_us
    if clamped:
        notes.append("model came in under the roofline: clamped to it")
        est = rl.time_us
    if calls:
        # The jitted program that runs the kernels is launched like any XLA program, costed the same way as
        # the plain-JAX side (its top-level program's bundles when dumped), so Pallas vs XLA compares like
        # with like.
        launch_us, launch_note = program_launch_us(llo, c)
        est += launch_us
        notes.append(f"{launch_note}: {launch_us:.3g} us, once per program, as for XLA programs")
    outside = outside_cost(program, c) if program is not None else None
    if outside_fusions is not None and outside_fusions.fusions:
        outside = _outside_from_fusions(outside_fusions, program)
        notes.append(
            f"the XLA ops beside the kernels: {len(outside_fusions.fusions)} ops of the compiled program costed "
            f"one by one, {outside.time_us:.3g} us ({outside_fusions.note})"
        )
    if outside is not None:
        est += outside.time_us
        notes += program.notes if program else []
    tiers = {p.tier for p in per}
    # The ops beside the kernels are part of the figure: llo only when they were costed from the schedule
    # too, by the rule the XLA baseline's table follows (llo only when every op is).
    outside_model = _outside_model_ops(outside, outside_fusions)
    tier: Literal["llo", "model"] = "llo" if tiers == {"llo"} and not outside_model else "model"
    if tier == "llo":
        tier_note = f"compute from the compiler's LLO schedule at {c.clock_ghz} GHz (clock: {c.clock_source})"
        if outside is not None and outside.time_us > 0:
            tier_note += (
                f"; the {len(outside_fusions.fusions)} XLA ops beside the kernels from their own programs"
            )
    elif "llo" in tiers and tiers != {"llo"}:
        tier_note = "mixed: some kernels matched no compiled program, so the whole estimate is labeled model"
    elif tiers == {"llo"}:
        shown = "; ".join(outside_model[:3]) + (
            f"; and {len(outside_model) - 3} more" if len(outside_model) > 3 else ""
        )
        tier_note = (
            "model: the kernels from the compiler's LLO schedule, but "
            f"{outside.time_us:.3g} us of XLA ops beside them from the HLO model ({shown})"
        )
    elif llo and not c.clock_ghz:
        tier_note = (
            f"model: LLO dump read, but {c.name} has no clock figure we trust to turn bundles into time"
        )
    elif llo and any(p.is_kernel for p in llo):
        kernels = [p for p in llo if p.is_kernel]
        tier_note = (
            f"model: LLO dump read ({len(kernels)} kernel program(s) for {len(calls)} pallas_call(s)), but their "
            f"compiled grids {[p.iteration_bounds for p in kernels]} did not pair with the traced "
            f"{[list(x.grid) for x in calls]}"
        )
    else:
        tier_note = "model: " + (llo_note or "no LLO dump (trace-only estimate)")
    ignored = [n for n in notes if n.startswith("ignored pl.CostEstimate")]
    moved = sum(p.hbm_bytes_moved for p in per)
    vmem = max(p.vmem_bytes_needed for p in per)
    limits = [x.vmem_limit_bytes for x in calls if x.vmem_limit_bytes]
    scoped = max(limits) if limits else default_scoped_vmem_bytes(c)
    comp = sum(p.compute_time_us for p in per)
    dma = sum(p.dma_time_us for p in per)
    ovh = sum(p.overhead_time_us for p in per)
    bound: Literal["compute", "memory", "overhead"] = (
        "overhead" if ovh >= max(comp, dma) else ("compute" if comp >= dma else "memory")
    )
    steps = sum(p.steps for p in per)
    pad_total = sum(p.padding_waste_fraction * p.hbm_bytes_moved for p in per)
    reason = _reason(bound, per, c, moved, flops, steps, ovh)
    if outside is not None and outside.time_us > 0.1 * est:
        reason += f"; {outside.time_us:.3g} us of XLA ops outside the kernels ({outside.flops_share:.0%} of the matmul flops)"
    if ignored:
        reason += "; " + ignored[0]
    return StaticEstimate(
        tier=tier,
        tier_note=tier_note,
        chip=c.name,
        estimated_time_us=est,
        bound=bound,
        roofline_time_us=rl.time_us,
        fraction_of_roofline=min(1.0, rl.time_us / est) if est > 0 else 1.0,
        hbm_bytes_moved=int(moved),
        flops=flops,
        steps=steps,
        vmem_bytes_needed=vmem,
        vmem_capacity_bytes=c.vmem_bytes,
        vmem_scoped_limit_bytes=scoped,
        fits_vmem=vmem <= c.vmem_bytes,
        above_scoped_vmem_limit=vmem > scoped,
        padding_waste_fraction=pad_total / moved if moved else 0.0,
        per_call=per,
        outside_kernel=outside,
        launch_us=launch_us,
        xla_fusions=outside_fusions if outside is not None and outside.basis == "fusions" else None,
        ignored_cost_estimates=ignored,
        reason=reason,
        assumptions=ASSUMPTIONS + notes,
    )


def _reason(
    bound: str, per: list[CallEstimate], c: ChipSpec, moved: int, flops: float, steps: int, ovh: float
) -> str:
    worst = max(per, key=lambda p: p.estimated_time_us)
    if bound == "memory":
        name, factor = max(worst.refetch_factors.items(), key=lambda kv: kv[1], default=("", 1.0))
        extra = f"; {name} of {worst.kernel_name} moved {factor:.3g}x its size" if factor > 1.05 else ""
        return f"memory-bound: {fmt_bytes(moved)} moved at {c.hbm_gbps:.0f} GB/s{extra}"
    if bound == "compute":
        eff = f" at {worst.mxu_efficiency:.0%} MXU fill" if worst.mxu_efficiency < 0.999 else ""
        if worst.when_bodies and worst.always_bundles_per_step is not None:
            return (
                f"compute-bound: {step_bundles_text(worst.always_bundles_per_step, worst.when_bodies)} "
                f"({worst.expected_bundles_per_step:.0f} bundles an average grid step) x {worst.steps} steps{eff}"
            )
        if worst.expected_bundles_per_step is not None:
            return (
                f"compute-bound: {worst.expected_bundles_per_step:.0f} bundles an average grid step (of "
                f"{worst.bundles_per_step} in the loop, pl.when branches by their share of the counted work) x "
                f"{worst.steps} steps{eff}"
            )
        if worst.bundles_per_step:
            return f"compute-bound: {worst.bundles_per_step} bundles per grid step x {worst.steps} steps{eff}"
        return f"compute-bound: {flops / 1e9:.3g} GFLOP at {c.peak_bf16_tflops:.0f} TFLOP/s peak bf16{eff}"
    return (
        f"overhead-bound: {steps} grid steps at the {STEP_OVERHEAD_US} us step minimum ({ovh:.3g} us of it "
        "idle); use bigger blocks"
    )


class EstimateReport(BaseModel):
    """A static TPU estimate of one kernel, or why none could be made (never a measurement)."""

    kind: Literal["estimate"] = "estimate"
    ok: bool
    kernel_path: str
    kernel_sha256: str | None = None
    target: str
    size: str
    estimate: StaticEstimate | None = None
    layout_problems: list[str] = Field(default_factory=list)
    failure: Failure | None = None
