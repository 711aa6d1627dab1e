"""`maxkernel analyze` / MCP `analyze_kernel`: what the TPU compiler made of a candidate, from its LLO.

Compiles the candidate for a TPU target with the LLO dump on (in a pool child: libtpu reads the dump
flags once per process), and reports per pallas_call and per XLA program: bundles per grid step,
unit utilization of the loop body, spills, the compiler's VMEM allocation against the scoped limit
and physical VMEM, DMAs per step; a short text a model can act on; and the estimate (tier `llo`
where the dump was read, else `model`, with the reason). Also the pool jobs for `estimate`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.estimate import StaticEstimate
from maxkernel.tpu_tools.cost.llo_parse import InnerLoop, ProgramLLO
from maxkernel.tpu_tools.reports import Failure

__all__ = ["AnalysisReport", "ProgramAnalysis", "estimate_one", "layout_problems", "summarize"]

MiB = 1 << 20
UNIT_LABELS = {"MXU": "MXU", "VALU": "VALU", "XLU": "XLU", "EUP": "EUP", "VLOAD": "vector loads",
               "VSTORE": "vector stores"}  # fmt: skip


class ProgramAnalysis(BaseModel):
    """One compiled program: a pallas_call kernel or an XLA program around it."""

    program: str
    is_kernel: bool
    grid: list[int] = Field(default_factory=list)
    straight_line_bundles: int
    loop_bundles: int = Field(description="bundles per grid step (the grid loop body)")
    executed_bundles_per_step: int | None = Field(
        default=None,
        description="bundles a grid step issues: loops in the body times their known trip counts",
    )
    inner_loops: list[InnerLoop] = Field(default_factory=list, description="loops in the kernel body")
    predicated_bundles: int
    total_bundles: int | None
    utilization: dict[str, float] = Field(
        description="fraction of the loop's bundles (all bundles for XLA programs) issuing on each unit"
    )
    spill_stores: int
    spill_fills: int
    vmem_allocated_bytes: int | None
    dmas_per_step: int
    dma_bytes_per_step: int
    notes: list[str] = Field(default_factory=list)


class AnalysisReport(BaseModel):
    """The compiler's view of one candidate on one TPU target (compile-only, never a timing)."""

    kind: Literal["analysis"] = "analysis"
    ok: bool
    tier: Literal["llo", "model"] = Field(description="llo: read from libtpu's dump; model: no dump")
    tier_note: str = ""
    kernel_path: str
    kernel_sha256: str | None = None
    target: str
    size: str
    kernels: list[ProgramAnalysis] = Field(default_factory=list)
    xla_programs: list[ProgramAnalysis] = Field(default_factory=list)
    vmem_scoped_limit_bytes: int | None = None
    vmem_capacity_bytes: int | None = None
    vmem_needed_bytes: int | None = Field(
        default=None, description="compiler's VMEM need (if over the limit)"
    )
    vmem_limit_to_fit_bytes: int | None = Field(
        default=None, description="vmem_limit_bytes that would make the kernel fit (None: it fits)"
    )
    compile_ms: float | None = None
    analysis_ms: float | None = Field(default=None, description="time spent reading the dump")
    summary: str = ""
    estimate: StaticEstimate | None = None
    failure: Failure | None = None


def _program(p: ProgramLLO) -> ProgramAnalysis:
    units = p.loop_units or p.all_units
    return ProgramAnalysis(
        program=p.program,
        is_kernel=p.is_kernel,
        grid=p.iteration_bounds,
        straight_line_bundles=p.straight_line_bundles,
        loop_bundles=p.loop_bundles,
        executed_bundles_per_step=(
            p.executed_loop_bundles if p.loop_bundles else p.executed_straight_line_bundles
        ),
        inner_loops=p.inner_loops,
        predicated_bundles=p.predicated_bundles,
        total_bundles=p.total_bundles,
        utilization={k: round(u.busy_fraction, 4) for k, u in units.items() if k in UNIT_LABELS},
        spill_stores=p.spill_stores,
        spill_fills=p.spill_fills,
        vmem_allocated_bytes=p.vmem_allocated_bytes,
        dmas_per_step=len(p.dmas_per_step),
        dma_bytes_per_step=sum(d.bytes for d in p.dmas_per_step),
        notes=p.notes,
    )


def _mib(n: float) -> str:
    return f"{n / MiB:.1f}"


def summarize(report: AnalysisReport) -> str:
    """A few lines a model can act on: utilization and the bound it implies, spills, VMEM, outside work."""
    lines = []
    for k in report.kernels:
        u = k.utilization
        mxu, vld, vst, valu = (u.get(x, 0.0) for x in ("MXU", "VLOAD", "VSTORE", "VALU"))
        where = "the loop's" if k.loop_bundles else "its"
        parts = [f"{k.program}: {k.loop_bundles or k.straight_line_bundles} bundles per grid step"]
        if k.inner_loops:
            trips = ", ".join(f"{lp.bundles} x {lp.trip_count or 'unknown'}" for lp in k.inner_loops)
            parts[0] += (
                f" ({k.executed_bundles_per_step} as issued: loops in the body of {trips} bundles x trips)"
            )
        parts.append(
            f"MXU busy in {mxu:.0%} of {where} bundles, vector loads in {vld:.0%}, stores in {vst:.0%}"
        )
        top = max(("MXU", mxu), ("VLOAD", vld), ("VSTORE", vst), ("VALU", valu), key=lambda t: t[1])
        if top[0] == "MXU" and mxu >= 0.5:
            parts.append("MXU-bound: good")
        elif top[0] in ("VLOAD", "VSTORE"):
            parts.append("load/store-bound" + (": MXU under-used, try larger blocks" if mxu < 0.5 else ""))
        elif top[0] == "VALU":
            parts.append("VALU-bound (elementwise work)")
        if k.spill_stores or k.spill_fills:
            parts.append(f"{k.spill_stores} spill stores, {k.spill_fills} fills: try smaller blocks")
        if k.predicated_bundles:
            parts.append(f"{k.predicated_bundles} bundles under pl.when branches")
        if k.vmem_allocated_bytes is not None and report.vmem_scoped_limit_bytes:
            parts.append(
                f"VMEM {_mib(k.vmem_allocated_bytes)} of {_mib(report.vmem_scoped_limit_bytes)} MiB scoped"
            )
        lines.append("; ".join(parts) + ".")
    if report.vmem_needed_bytes is not None and report.vmem_limit_to_fit_bytes:
        lines.append(
            f"The compiler needs {_mib(report.vmem_needed_bytes)} MiB of VMEM, over the "
            f"{_mib(report.vmem_scoped_limit_bytes or 0)} MiB scoped limit: set vmem_limit_bytes="
            f"{report.vmem_limit_to_fit_bytes} (physical {_mib(report.vmem_capacity_bytes or 0)} MiB)."
        )
    elif report.vmem_needed_bytes is not None:
        lines.append(
            f"The kernel needs {_mib(report.vmem_needed_bytes)} MiB of VMEM, more than the chip has."
        )
    heavy = [p for p in report.xla_programs if p.program != "TLP"]
    if heavy:
        names = ", ".join(f"{p.program} ({p.total_bundles} bundles)" for p in heavy[:4])
        lines.append(f"XLA programs outside the kernels: {names}.")
    est = report.estimate
    if est is not None:
        line = f"Estimate ({est.tier}): {est.estimated_time_us:.3g} us, {est.bound}-bound."
        if est.outside_kernel is not None and est.outside_kernel.time_us > 0.05 * est.estimated_time_us:
            line += f" Of it {est.outside_kernel.time_us:.3g} us is XLA work outside the kernels."
        if est.ignored_cost_estimates:
            line += " " + est.ignored_cost_estimates[0] + "."
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# The work, inside a pool child


def _limit_to_fit(need: int, capacity: int) -> int | None:
    """Next MiB above the need plus 10% headroom, or None when even physical VMEM is too small."""
    want = int(math.ceil(need * 1.1 / MiB) * MiB)
    return min(want, capacity) if need <= capacity else None


def estimate_one(
    fn: Any,
    args: list,
    calls: list,
    chip: Any,
    dump_root: Path | None,
    total_flops: float | None,
    traced: Any = None,
    input_values: Sequence[Any | None] | None = None,
) -> tuple[StaticEstimate | None, list[ProgramLLO], dict[str, Any]]:
    """Estimate one traced candidate, compiling it with the dump when possible.

    `traced` is jit(fn).trace(*args) when the caller has it (one trace serves the pallas_call scan,
    the jaxpr count and the compile). Returns (estimate, programs, facts) where facts has compile_ms,
    parse_ms, error, vmem_needed.
    """
    import jax

    from maxkernel.tpu_tools.cost.data_work import call_data, data_dependent
    from maxkernel.tpu_tools.cost.estimate import estimate_pallas
    from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
    from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, scoped_vmem_error
    from maxkernel.tpu_tools.hardware.chips import ChipSpec, get_chip
    from maxkernel.tpu_tools.problem.kernel_values import refusal

    facts: dict[str, Any] = {}
    if traced is None:
        traced = jax.jit(fn).trace(*args)
    data = None
    given = input_values is not None and any(v is not None for v in input_values)
    if calls and (given or any(data_dependent(c) for c in calls)):
        t0 = time.perf_counter()
        try:  # no values given: the program's own constant tables still decide a kernel's prefetch operands
            data = call_data(traced.jaxpr, list(input_values or ()))
        except Exception as e:  # noqa: BLE001 - the values cost nothing but their use: bounds stand
            facts["data_error"] = f"{type(e).__name__}: {e}"[:300]
        facts["data_ms"] = (time.perf_counter() - t0) * 1e3
        if data is not None and len(data) != len(calls):
            data = None
    program = program_cost(traced.jaxpr, data)
    programs: list[ProgramLLO] = []
    note = None
    cost: dict[str, float] = {}
    table = None
    outside = None
    spec = chip if isinstance(chip, ChipSpec) else get_chip(chip)
    refused = refusal(traced.jaxpr, spec.vmem_bytes, spec.name) if calls else None
    if refused is not None:  # no compile can take it, or Mosaic would spend minutes on it
        facts["error"], facts["not_compiled"] = refused.message, True
        if refused.kind == "vmem_exhausted":
            facts["vmem_needed"], facts["vmem_limit"] = refused.value.nbytes, spec.vmem_bytes
        note = "not compiled: " + facts["error"]
    elif dump_root is None:
        note = "the LLO dump could not be switched on in this process"
    else:
        try:
            compiled, programs, times = compile_with_dump(fn, args, dump_root, traced)
            facts.update(times)
            if not calls:
                from maxkernel.tpu_tools.cost.fusions import cost_fusions
                from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of

                cost = cost_analysis_of(compiled)
                table = cost_fusions(compiled, chip, programs)
            if not any(p.is_kernel for p in programs) and calls:
                note = "the compile wrote no readable kernel dump"
            if calls and (program.outside_flops or program.outside_vpu_ops or program.outside_bytes):
                outside = _outside_table(compiled, spec, len(calls), programs)
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            facts["error"] = msg[:4000]
            verdict = scoped_vmem_error(msg)
            if verdict:
                facts["vmem_needed"], facts["vmem_limit"] = verdict
            note = "the compile failed: " + msg.splitlines()[0][:200]
    if calls:
        est = estimate_pallas(
            calls,
            chip,
            total_flops=total_flops,
            program=program,
            llo=programs,
            llo_note=note,
            outside_fusions=outside,
            data=data,
        )
        if "compile_ms" in facts and "error" not in facts:
            # VMEM from the compiler, always: it accepted every kernel at this shape under the limit that
            # applies, so our own count never flags it (it stays in vmem_bytes_needed when no dump says more).
            alloc = [p.vmem_allocated_bytes for p in programs if p.is_kernel and p.vmem_allocated_bytes]
            est.fits_vmem, est.above_scoped_vmem_limit = True, False
            if alloc:
                est.vmem_bytes_needed = max(alloc)
            est.assumptions.append(
                "VMEM: the target's compiler accepted every kernel at this shape"
                + (f" (its VMEM allocation {max(alloc)} B)" if alloc else "")
            )
    elif table is not None:  # plain JAX: XLA's TPU program, fusion by fusion (the roofline beside it)
        from maxkernel.tpu_tools.cost.program_estimate import xla_estimate

        old = estimate_pallas(
            [], chip, total_flops=cost.get("flops", 0.0), total_bytes=cost.get("bytes accessed", 0.0)
        )
        est = xla_estimate(table, chip, old_roofline_us=old.roofline_time_us)
    elif "flops" in cost and "bytes accessed" in cost:  # plain JAX: XLA's cost analysis on the TPU target
        est = estimate_pallas([], chip, total_flops=cost["flops"], total_bytes=cost["bytes accessed"])
    else:  # no compile: the jaxpr's own count
        flops = program.outside_flops + program.outside_vpu_ops
        est = estimate_pallas([], chip, total_flops=flops, total_bytes=program.outside_bytes)
    return est, programs, facts


def _outside_table(compiled: Any, chip: Any, kernels: int | None = None, programs: Any = None) -> Any:
    """The compiled program's XLA ops beside its kernels, fusion by fusion (None if its HLO cannot be read:
    the jaxpr's roofline count stands).

    Each op from its own program in the dump where it has one (tier llo), as the XLA baseline's ops and a
    model's hotspots are, so that an op costs the same beside a kernel as in the plain-JAX program it
    replaces; an op the dump does not cover falls back to its HLO and the estimate says so."""
    from maxkernel.tpu_tools.cost.fusions import cost_fusions

    try:
        return cost_fusions(compiled, chip, programs, skip_kernels=True, kernels=kernels)
    except Exception:  # noqa: BLE001 - an HLO we cannot read
        return None


def layout_problems(calls: Sequence[Any]) -> list[str]:
    """Blocks whose last two dims break the TPU (8,128) rule (divisible, or equal to the array dim)."""
    out = []
    for call in calls:
        for b in call.blocks:
            if not b.pipelined or b.memory_space not in ("vmem", "any"):
                continue
            dims = [(i, s) for i, s in enumerate(b.block_shape) if s is not None]
            for (i, s), align in zip(dims[-2:], (8, 128)[-len(dims[-2:]) :], strict=True):
                if s % align and s != b.array_shape[i]:
                    out.append(
                        f"{call.kernel_name} {b.role} {b.position}: block dim {s} of {tuple(b.block_shape)} "
                        f"is not a multiple of {align} nor the array dim {b.array_shape[i]}"
                    )
    return out
