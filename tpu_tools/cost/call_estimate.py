"""One kernel's pipeline estimate: blocks fetched when their index changes, compute per step, megacore.

Split from estimate.py so that fusions.py can cost XLA's own Mosaic kernels (mosaic_call.py) the way a
user's pallas_call is costed, without importing the program-level estimate (which imports fusions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.block_schedule import (
    array_bytes,
    block_padded_bytes,
    block_schedule,
    bounded_grid,
    itemsize,
    kernel_block_shape,
    padded_bytes,
    round_up,
)
from maxkernel.tpu_tools.cost.branches import KernelBranches
from maxkernel.tpu_tools.cost.llo_parse import InnerLoop, ProgramLLO
from maxkernel.tpu_tools.hardware.chips import ChipSpec, get_chip
from maxkernel.tpu_tools.hardware.megacore import core_split, cores_per_device
from maxkernel.tpu_tools.problem.pallas_info import PallasCallInfo

MiB = 1 << 20

# Shortest time one Pallas grid step takes on TPU (loop bookkeeping, DMA issue/wait, semaphores): a step
# costs max(this, compute, DMA). The JAX Pallas TPU guides quote ~0.35 us per grid step, and the
# published v5e bf16 128^3-block matmul at n=8192 is 91.8 ms / 64^3 steps = 0.350 us per step while
# its DMA (64 KiB) and bundles (185 / 1.5 GHz) take less (benchmarks/data/v5e_matmul_published.csv).
# Calibrated on v5e; used for every chip.
STEP_OVERHEAD_US = 0.35
# A declared pl.CostEstimate below this fraction of the flops the kernel body counts is ignored.
UNDER_DECLARED_FRACTION = 0.5

# VPU throughput: one (8,128) vreg per cycle per ALU slot; we assume 2 useful elementwise ops per cycle
# per lane-sublane (an assumption: TPU VPUs issue several VALU slots, but loads/stores/converts compete).
VPU_ELEMENT_OPS_PER_CYCLE = 8 * 128 * 2
# Without any flop count, an elementwise kernel is charged this many VPU ops per element it touches.
VPU_OPS_PER_ELEMENT = 2
# A transcendental (exp, rsqrt, ...) costs this many VPU-op equivalents (the EUP is slower per element).
TRANSCENDENTAL_VPU_OPS = 4


class WhenCharge(BaseModel):
    """One pl.when body of a compiled grid loop and the share of grid steps charged for it (tier llo)."""

    bundles: int = Field(description="the body's bundles as issued when its branch is taken")
    fraction: float | None = Field(
        description="share of grid steps whose predicate holds; None: unknown (reads memory), charged every step"
    )


class CallEstimate(BaseModel):
    """The pipeline model's view of one pallas_call."""

    kernel_name: str
    grid: tuple[int, ...]
    steps: int
    estimated_time_us: float
    compute_time_us: float = Field(description="sum over steps of MXU/VPU time")
    dma_time_us: float = Field(description="sum over steps of HBM<->VMEM DMA time (overlapped or not)")
    overhead_time_us: float
    prologue_us: float
    epilogue_us: float
    flops: float
    flops_source: str = Field(
        description="cost_estimate | kernel body | matmul blocks | total_flops | elementwise"
    )
    tier: Literal["llo", "model"] = "model"
    bundles_per_step: int | None = Field(default=None, description="compiler's grid-loop bundles (llo tier)")
    expected_bundles_per_step: float | None = Field(
        default=None,
        description="bundles an average grid step issues: pl.when bodies weighted by the share of steps that "
        "take them (llo tier; None: no branch share known, every step issues bundles_per_step)",
    )
    always_bundles_per_step: int | None = Field(
        default=None,
        description="bundles every grid step issues: the loop less its pl.when bodies (llo tier)",
    )
    when_bodies: list[WhenCharge] = Field(
        default_factory=list, description="the loop's pl.when bodies, paired in order with the body's conds"
    )
    mxu_efficiency: float = Field(description="fraction of MXU rows/columns the blocks fill")
    hbm_bytes_moved: int
    min_hbm_bytes: int = Field(
        description="each operand read or written exactly once (a pipelined one: at most what its blocks move)"
    )
    refetch_factors: dict[str, float] = Field(description="bytes moved / array bytes, per operand")
    vmem_bytes_needed: int
    padding_waste_fraction: float
    index_maps: str = Field(description="affine (closed form) | enumerated | sampled | unknown prefetch")
    ici_time_us: float = Field(
        default=0.0, description="remote-DMA bytes over one ICI link (multi-chip kernels)"
    )
    cores: int = Field(default=1, description="TensorCores the grid is split across (megacore: 2)")
    steps_per_core: int = Field(
        default=0, description="the busiest core's grid steps (= steps without a split)"
    )
    notes: list[str] = Field(default_factory=list)


def chip_spec(chip: str | ChipSpec) -> ChipSpec:
    return chip if isinstance(chip, ChipSpec) else get_chip(chip)


# ---------------------------------------------------------------------------------------------------
# Compute per step


def _matmul_blocks(call: PallasCallInfo) -> tuple[int, int, int] | None:
    """(bm, bk, bn) when the call looks like a tiled matmul: lhs [bm,bk], rhs [bk,bn], out [bm,bn]."""
    if len(call.inputs) < 2 or not call.outputs:
        return None
    a, b, o = (kernel_block_shape(x) for x in (call.inputs[0], call.inputs[1], call.outputs[0]))
    if len(a) < 2 or len(b) < 2 or len(o) < 2:
        return None
    (bm, bk), (bk2, bn), (om, on) = a[-2:], b[-2:], o[-2:]
    if bk == bk2 and om == bm and on == bn:
        return bm, bk, bn
    return None


def body_mxu_rate(
    c: ChipSpec, body_flops: float | None, pass_flops: Mapping[str, float] | None, operand_dtype: Any
) -> tuple[float, str]:
    """(flops/s, what set it): the MXU rate of a kernel body's matmuls at the precision each computes.

    Each dot runs at its MXU dtype's rate over its passes (dot_precision.py: an f32 dot at DEFAULT one
    f32 pass, at HIGHEST six; one cast to bf16 in the body one bf16 pass), weighted by its flops. Without
    counted dots, the kernel's first operand's dtype sets it."""
    time_s = sum(f / c.mxu_flops_per_s(d) for d, f in (pass_flops or {}).items())
    if body_flops and time_s > 0:
        rate = body_flops / time_s
        kinds = ", ".join(sorted(d for d, f in (pass_flops or {}).items() if f > 0))
        return rate, f"the body's dots ({kinds} passes at their precision)"
    return c.mxu_flops_per_s(operand_dtype), f"the first operand's dtype ({operand_dtype})"


def vpu_ops_per_s(c: ChipSpec) -> float:
    # Clock inferred from the MXU peak: peak = 2 flops * rows * cols * num_mxus * clock.
    clock_hz = c.peak_bf16_flops_per_s / (2 * c.mxu_shape[0] * c.mxu_shape[1] * c.num_mxus)
    return clock_hz * VPU_ELEMENT_OPS_PER_CYCLE


def _vmem_needed(call: PallasCallInfo, moved: Sequence[int] | None = None) -> tuple[int, int, int]:
    """(VMEM bytes with double buffering + scratch, padded bytes of blocks, real bytes of blocks).

    As Mosaic allocates (read from our v5e LLO dumps): one buffer per block when the kernel has a single
    step or the block's index never changes (moved once), two otherwise. Mosaic's internal scratch is
    left out: a v6e kernel allocating 32 MiB of blocks + 72 KiB of it compiles under the 32 MiB limit.
    """
    need, padded, real = 0, 0, 0
    single_step = (call.num_steps or 1) <= 1
    for i, b in enumerate(call.blocks):
        if not b.pipelined or b.memory_space != "vmem":
            continue
        pb = block_padded_bytes(b)
        once = single_step or (moved is not None and moved[i] <= pb)
        need += (b.buffer_count or (1 if once else 2)) * pb
        padded += pb
        real += b.block_bytes
    for s in call.scratch:
        if s.memory_space == "vmem" and s.bytes:
            need += padded_bytes(s.shape, itemsize(s.dtype))
    return need, padded, real


def estimate_call(
    call: PallasCallInfo,
    c: ChipSpec,
    total_flops: float | None = None,
    scalar_prefetch: Sequence[Any] | None = None,
    body_flops_per_step: float | None = None,
    llo: ProgramLLO | None = None,
    branches: KernelBranches | None = None,
    body_loop_trips: Sequence[float | None] | None = None,
    body_mxu_pass_flops: Mapping[str, float] | None = None,
) -> CallEstimate:
    """One kernel's pipeline estimate; without scalar-prefetch values a table-read index is fetched every step.

    body_loop_trips: the trip count of each loop in the body's jaxpr (branches.body_loop_trips), used for
    a compiled loop whose trip count the dump does not state when the two lists pair up.
    body_mxu_pass_flops: one step's matmul flops x their MXU passes by rate dtype (jaxpr_cost), so the
    MXU time follows each dot's operands and precision, not the kernel's input dtype."""
    grid, notes = bounded_grid(call)
    steps = max(1, math.prod(grid))
    sched = block_schedule(call, scalar_prefetch)
    notes += sched.notes
    bw = c.hbm_bytes_per_s

    # Work per step.
    mm = _matmul_blocks(call)
    ce = call.cost_estimate
    mxu_eff = 1.0
    transcendentals = float(ce.transcendentals) if ce else 0.0
    if mm is not None:
        bm, bk, bn = mm
        rows, cols = c.mxu_shape
        # The MXU consumes [*, rows] x [rows, cols] weight tiles: partial tiles waste the array.
        mxu_eff = (bk / round_up(bk, rows)) * (bn / round_up(bn, cols))
    counted = body_flops_per_step * steps if body_flops_per_step else 0.0
    if counted and branches is not None and branches.known:
        counted = min(counted, branches.expected_flops() * steps)  # branches run on their share of the steps
    if ce is not None and ce.flops > 0 and counted and ce.flops < UNDER_DECLARED_FRACTION * counted:
        notes.append(
            f"ignored pl.CostEstimate of {call.kernel_name}: it declares {ce.flops:.3g} flops, the kernel "
            f"body computes {counted:.3g}"
        )
        ce = None
    if ce is not None and ce.flops > 0:
        flops, src = float(ce.flops), "cost_estimate"
    elif counted:
        flops, src = counted, "kernel body"
    elif mm is not None:
        flops, src = 2.0 * mm[0] * mm[1] * mm[2] * steps, "matmul blocks"
    elif total_flops is not None:
        flops, src = float(total_flops), "total_flops"
    else:
        flops, src = 0.0, "elementwise"
    elements = sum(math.prod(kernel_block_shape(b)) for b in call.blocks if b.pipelined)
    vpu_rate = vpu_ops_per_s(c)
    vpu_ops = elements * VPU_OPS_PER_ELEMENT + transcendentals / steps * TRANSCENDENTAL_VPU_OPS
    mm_dtype = call.inputs[0].dtype if call.inputs else "bfloat16"
    mxu_rate, _ = body_mxu_rate(c, body_flops_per_step, body_mxu_pass_flops, mm_dtype)
    if mm is not None or counted:  # the body has matmul/conv flops: they run on the MXU
        mxu_s = flops / steps / (mxu_rate * mxu_eff)
    else:
        mxu_s = 0.0
        vpu_ops += flops / steps  # non-matmul flops run on the VPU
    vpu_s = vpu_ops / vpu_rate
    compute_s = max(mxu_s, vpu_s)  # assumption: MXU and VPU work overlap within a step
    tier: Literal["llo", "model"] = "model"
    bundles = None
    straight_s = 0.0
    mxu_floor_s = 0.0  # tier llo: the MXU time the bundles cannot show (f32 passes; loops of unknown trips)
    if llo is not None and c.clock_ghz:
        # The compiler's schedule: one grid step runs the loop body; the rest runs once. The MXU's
        # f32 passes take longer than the schedule shows (same bundles, ~2.5x time), so the dtype's
        # MXU time is a floor under the bundle time.
        # Loops inside the body (fori_loop, scan, while) issue their bundles once per iteration: each is
        # charged times its trip count where the dump states it.
        loop_b = llo.executed_loop_bundles if llo.executed_loop_bundles is not None else llo.loop_bundles
        line_b = llo.straight_line_bundles
        if llo.executed_straight_line_bundles is not None:
            line_b = llo.executed_straight_line_bundles
        bundles = loop_b if llo.loop_bundles else line_b
        loops, from_jaxpr = _loops_with_jaxpr_trips(llo.inner_loops, body_loop_trips)
        bundles = int(round(bundles + _extra_bundles(loops, from_jaxpr)))
        if not llo.loop_bundles:
            line_b = bundles
        hz = c.clock_ghz * 1e9
        # the floor holds where some dot runs f32 vmatmuls (f32 operands in the body, else an f32 input)
        f32_mxu = (
            (body_mxu_pass_flops or {}).get("float32", 0.0) > 0
            if body_mxu_pass_flops is not None and body_flops_per_step
            else str(mm_dtype) in ("float32", "f32")
        )
        mxu_floor_s = mxu_s if f32_mxu else 0.0
        compute_s = max(bundles / hz, mxu_floor_s)
        straight_s = (line_b / hz) if llo.loop_bundles else 0.0
        tier = "llo"
        known = [lp for lp in loops if lp.trip_count]
        unknown = [lp for lp in loops if not lp.trip_count]
        if known:
            notes.append(
                f"{call.kernel_name}: {len(known)} loop(s) in the body charged their bundles times their trip "
                f"counts ({', '.join(f'{lp.bundles} x {lp.trip_count:.4g}' for lp in known)}"
                + (f"; {len(from_jaxpr)} trip count(s) from the body's jaxpr" if from_jaxpr else "")
                + f"): {bundles} bundles per step"
            )
        if unknown:
            # The bundles say one iteration; the jaxpr's matmul work (scans times their lengths) is a floor.
            mxu_floor_s = mxu_s
            compute_s = max(compute_s, mxu_floor_s)
            notes.append(
                f"{call.kernel_name}: {len(unknown)} loop(s) in the body with a trip count the dump does not "
                f"state ({sum(lp.bundles for lp in unknown)} bundles) counted once; compute is at least the "
                "body's counted matmul work"
            )
        elif llo.inner_loop_bundles and not llo.inner_loops:
            notes.append(f"{call.kernel_name}: {llo.inner_loop_bundles} bundles in inner loops counted once")

    # pl.when branches run on the grid steps whose predicate holds (evaluated over the grid where it is a
    # function of the program ids). Tier model: the counted flops above are already per share. Tier llo:
    # the loop holds every branch's bundles. Where the dump's pl.when regions pair with the body's conds, a
    # step is charged the bundles outside them plus each region's bundles times its share (a 50k matmul's
    # GELU + softmax epilogue, 17K bundles, on 1/32 of its steps); else the loop's bundles times the
    # expected share of the branches' counted work. The MXU floor comes from the per-share flops, so it is
    # not scaled again (a dot outside every branch keeps its whole floor).
    expected_bundles: float | None = None
    always_bundles: int | None = None
    when_bodies: list[WhenCharge] = []
    fractions = branches.when_fractions() if branches is not None else None
    regions = llo.when_regions if llo is not None and tier == "llo" else []
    if bundles is not None and regions and fractions is not None and len(fractions) == len(regions):
        # The compiled loop's own pl.when bodies, each charged on the steps whose predicate holds.
        when_bodies = [
            WhenCharge(bundles=r.executed_bundles, fraction=f)
            for r, f in zip(regions, fractions, strict=True)
        ]
        always_bundles = max(0, bundles - sum(w.bundles for w in when_bodies))
        expected_bundles = always_bundles + sum(
            w.bundles * (1.0 if w.fraction is None else w.fraction) for w in when_bodies
        )
        compute_s = max(expected_bundles / (c.clock_ghz * 1e9), mxu_floor_s)
        unknown_n = sum(1 for w in when_bodies if w.fraction is None)
        notes.append(
            f"{call.kernel_name}: {step_bundles_text(always_bundles, when_bodies)} ({expected_bundles:.0f} an "
            f"average step, of {bundles} in the loop): the dump's {len(regions)} pl.when bodies paired in order "
            "with the body's conds, each charged on the share of grid steps its predicate holds (evaluated over "
            "the grid, or on the prefetch tables' values)"
            + (f"; {unknown_n} predicate(s) read memory and stay charged every step" if unknown_n else "")
            + (
                f"; the MXU floor ({mxu_floor_s * 1e6:.3g} us a step) is above that and sets it"
                if mxu_floor_s * c.clock_ghz * 1e9 > expected_bundles
                else ""
            )
        )
    elif tier == "llo" and llo is not None and llo.predicated_bundles and not (branches and branches.known):
        notes.append(
            f"{call.kernel_name}: {llo.predicated_bundles} bundles under pl.when branches charged every step "
            "(no predicate evaluated over the grid)"
        )
    elif tier == "llo" and regions and branches is not None:
        notes.append(
            f"{call.kernel_name}: the dump's {len(regions)} pl.when bodies do not pair with the body's "
            f"{len(branches.conds)} top-level conds: the step's bundles are weighted by the branches' counted work"
        )
    if (
        not when_bodies and branches is not None and branches.known
    ):  # no regions paired: shares of counted work
        taken = [f"{b.fraction:.2f}" for cond in branches.conds for b in cond[1:] if b.fraction is not None]
        how = "flops counted per branch on the steps that run it"
        share = branches.active_fraction(
            mxu_rate * mxu_eff, vpu_rate, TRANSCENDENTAL_VPU_OPS, all_branches=True
        )
        if tier == "llo" and share is not None and share < 0.999 and bundles is not None:
            shared_s = bundles / (c.clock_ghz * 1e9) * share
            expected_bundles = bundles * share
            compute_s = max(shared_s, mxu_floor_s)
            how = f"a step's compute is {share:.2f} of the loop's bundles, weighted by each branch's counted work"
            if mxu_floor_s > shared_s:
                how += (
                    f"; the MXU floor ({mxu_floor_s * 1e6:.3g} us a step, from the flops each branch counts) "
                    "is above that and sets it, unscaled"
                )
        notes.append(
            f"{call.kernel_name}: pl.when branches taken on {', '.join(taken)} of the {branches.steps} grid "
            f"steps (predicates evaluated over the grid): {how}"
            + (
                f"; {branches.unknown} predicate(s) read memory and stay charged every step"
                if branches.unknown
                else ""
            )
        )
    # Non-pipelined HBM operands (pl.ANY / HBM): the kernel DMAs them itself; charge them once.
    manual = [b for b in call.blocks if not b.pipelined and b.memory_space in ("any", "hbm")]
    manual_bytes = sum(array_bytes(b) for b in manual)
    if manual:
        notes.append("operands in pl.ANY/HBM are manual DMAs: charged once each, spread over the steps")

    # Pipeline: step t computes while the DMAs of transition t -> t+1 run; no step is shorter than
    # the fixed per-step cost (what it adds on top of compute and DMA is the overhead).
    floor_s = STEP_OVERHEAD_US * 1e-6
    manual_per_step = manual_bytes / steps
    steady = 0.0
    dma_s = 0.0
    overhead_s = 0.0
    for count, overlapped, exposed in sched.classes:
        t_dma = (overlapped + manual_per_step) / bw
        t_exposed = exposed / bw  # single-buffered blocks: their fetch waits for the step to finish
        busy = max(compute_s, t_dma)
        steady += count * (max(floor_s, busy) + t_exposed)
        overhead_s += count * max(0.0, floor_s - busy)
        dma_s += count * (t_dma + t_exposed)
    last_busy = max(compute_s, manual_per_step / bw)
    last_step = max(floor_s, last_busy)
    overhead_s += max(0.0, floor_s - last_busy)
    prologue_s = sched.first_fetch_bytes / bw
    epilogue_s = sched.last_writeback_bytes / bw
    # Megacore: the leading parallel axes run on both TensorCores at once; the busiest core's share of
    # the steps sets the time (each core streams its own blocks at the chip table's per-core rate).
    split = core_split(grid, call.dimension_semantics, cores_per_device(c.name))
    if split.split_axes:
        share = split.steps_per_core / steps
        steady, last_step, overhead_s = steady * share, last_step * share, overhead_s * share
        notes.append(f"{call.kernel_name}: megacore split, {split.note}")
    elif split.note:
        notes.append(f"{call.kernel_name}: {split.note}")
    # ICI: bytes this device sends to others (remote DMAs), over one link; no overlap with compute assumed.
    ici_s = 0.0
    if call.remote_dma_bytes:
        if c.ici_link_gbps:
            ici_s = call.remote_dma_bytes / (c.ici_link_gbps * 1e9)
            notes.append(
                f"{call.kernel_name}: {call.remote_dmas} remote DMA(s), {fmt_bytes(call.remote_dma_bytes)} over ICI "
                f"at {c.ici_link_gbps:g} GB/s per link ({c.ici_source}); not overlapped with compute"
            )
        else:
            notes.append(f"{call.kernel_name}: remote DMAs not costed: no ICI bandwidth known for {c.name}")
    total_s = prologue_s + steady + last_step + epilogue_s + straight_s + ici_s

    moved = sum(sched.moved_per_block) + manual_bytes
    # Each operand read or written once; a pipelined one whose blocks never cover it (a grid that stops
    # early, an index that stops moving) at most the bytes its blocks move.
    min_bytes = sum(
        min(array_bytes(b), m) if b.pipelined else array_bytes(b)
        for b, m in zip(call.blocks, sched.moved_per_block, strict=True)
        if b.pipelined or b.memory_space in ("any", "hbm")
    )
    refetch = {}
    for b, m in zip(call.blocks, sched.moved_per_block, strict=True):
        if b.pipelined and array_bytes(b):
            refetch[f"{'in' if b.role == 'input' else 'out'}{b.position}"] = m / array_bytes(b)
    vmem, padded, real = _vmem_needed(call, sched.moved_per_block)
    return CallEstimate(
        kernel_name=call.kernel_name,
        grid=grid,
        steps=steps,
        estimated_time_us=total_s * 1e6,
        compute_time_us=compute_s * steps * 1e6,
        dma_time_us=(dma_s + prologue_s + epilogue_s) * 1e6,
        overhead_time_us=overhead_s * 1e6,
        prologue_us=prologue_s * 1e6,
        epilogue_us=epilogue_s * 1e6,
        flops=flops,
        flops_source=src,
        tier=tier,
        bundles_per_step=bundles,
        expected_bundles_per_step=expected_bundles,
        always_bundles_per_step=always_bundles,
        when_bodies=when_bodies,
        mxu_efficiency=mxu_eff,
        hbm_bytes_moved=int(moved),
        min_hbm_bytes=int(min_bytes),
        refetch_factors=refetch,
        vmem_bytes_needed=vmem,
        padding_waste_fraction=(padded - real) / padded if padded else 0.0,
        index_maps=sched.mode,
        ici_time_us=ici_s * 1e6,
        cores=split.cores if split.split_axes else 1,
        steps_per_core=split.steps_per_core,
        notes=notes,
    )


def _loops_with_jaxpr_trips(
    loops: list[InnerLoop], trips: Sequence[float | None] | None
) -> tuple[list[InnerLoop], list[int]]:
    """The dump's loops with the jaxpr's trip counts filled in where the dump states none, and the indices
    filled. Only when the lists pair up: as many loops, and every trip count both state agrees."""
    if not trips or len(trips) != len(loops) or not any(lp.trip_count is None for lp in loops):
        return loops, []
    if any(
        lp.trip_count is not None and t is not None and lp.trip_count != t
        for lp, t in zip(loops, trips, strict=True)
    ):
        return loops, []
    out, filled = [], []
    for i, (lp, t) in enumerate(zip(loops, trips, strict=True)):
        if lp.trip_count is None and t:
            out.append(lp.model_copy(update={"trip_count": t}))
            filled.append(i)
        else:
            out.append(lp)
    return out, filled


def _extra_bundles(loops: list[InnerLoop], filled: list[int]) -> float:
    """Bundles the dump's executed count lacks for the loops whose trip count came from the jaxpr: each
    loop's bundles x (trips - 1), times the trip counts of the loops around it."""
    extra = 0
    for i in filled:
        lp = loops[i]
        around = math.prod(
            o.trip_count or 1
            for o in loops
            if o is not lp and o.start < lp.start < o.start + o.bundles and o.depth < lp.depth
        )
        inside = sum(  # the dump's loops nested in it, counted for its one iteration: now for each
            (o.trip_count or 1) * o.bundles - o.bundles
            for j, o in enumerate(loops)
            if j not in filled and o.depth == lp.depth + 1 and lp.start < o.start < lp.start + lp.bundles
        )
        extra += (lp.trip_count - 1) * (lp.bundles + inside) * around
    return extra


def share_text(fraction: float | None) -> str:
    """A share of grid steps as a reader counts them: "1/32 of steps", "every step", "0.37 of steps"."""
    if fraction is None or fraction >= 0.9995:
        return "every step"
    if fraction <= 0:
        return "no step"
    inv = 1.0 / fraction
    if abs(inv - round(inv)) < 1e-6 * inv:
        return f"1/{round(inv)} of steps"
    return f"{fraction:.2g} of steps"


def step_bundles_text(always: int, bodies: Sequence[WhenCharge]) -> str:
    """ "4393 bundles every step + 2049 on 1/32 of steps + ...": what a grid step is charged, body by body."""
    parts = [f"{always} bundles every step"]
    parts += [f"{w.bundles} on {share_text(w.fraction)}" for w in bodies if w.fraction is not None]
    unknown = [w.bundles for w in bodies if w.fraction is None]
    if unknown:
        parts.append(
            f"{sum(unknown)} in {len(unknown)} pl.when bodies on every step (predicates read memory: a ceiling)"
        )
    return " + ".join(parts)


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
