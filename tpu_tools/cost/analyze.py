"""`maxkernel analyze` / MCP `analyze_kernel`: what the TPU compiler made of a candidate, from its LLO.

Compiles the candidate for a TPU target with the LLO dump on (in a pool child: libtpu reads the dump
flags once per process), and reports per pallas_call and per XLA program: bundles per grid step,
unit utilization of the loop body, spills, the compiler's VMEM allocation against the scoped limit
and physical VMEM, DMAs per step; a short text a model can act on; and the estimate (tier `llo`
where the dump was read, else `model`, with the reason). Also the pool jobs for `estimate`.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.estimate import StaticEstimate, default_scoped_vmem_bytes
from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO
from maxkernel.tpu_tools.reports import Failure

__all__ = ["AnalysisReport", "ProgramAnalysis", "analyze_job", "estimate_one", "summarize"]

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
    fn: Any, args: list, calls: list, chip: Any, dump_root: Path | None, total_flops: float | None
) -> tuple[StaticEstimate | None, list[ProgramLLO], dict[str, Any]]:
    """Estimate one traced candidate, compiling it with the dump when possible.

    Returns (estimate, programs, facts) where facts has compile_ms, parse_ms, error, vmem_needed.
    """
    import jax

    from maxkernel.tpu_tools.cost.estimate import estimate_pallas
    from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
    from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, scoped_vmem_error

    facts: dict[str, Any] = {}
    program = program_cost(jax.jit(fn).trace(*args).jaxpr)
    programs: list[ProgramLLO] = []
    note = None
    cost: dict[str, float] = {}
    if dump_root is None:
        note = "the LLO dump could not be switched on in this process"
    else:
        try:
            compiled, programs, times = compile_with_dump(fn, args, dump_root)
            facts.update(times)
            if not calls:
                from maxkernel.tpu_tools.judged.compile import cost_analysis_of

                cost = cost_analysis_of(compiled)
            if not any(p.is_kernel for p in programs) and calls:
                note = "the compile wrote no readable kernel dump"
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            facts["error"] = msg[:4000]
            verdict = scoped_vmem_error(msg)
            if verdict:
                facts["vmem_needed"], facts["vmem_limit"] = verdict
            note = "the compile failed: " + msg.splitlines()[0][:200]
    if calls:
        est = estimate_pallas(
            calls, chip, total_flops=total_flops, program=program, llo=programs, llo_note=note
        )
    elif "flops" in cost and "bytes accessed" in cost:  # plain JAX: XLA's cost analysis on the TPU target
        est = estimate_pallas([], chip, total_flops=cost["flops"], total_bytes=cost["bytes accessed"])
    else:  # no compile: the jaxpr's own count
        flops = program.outside_flops + program.outside_vpu_ops
        est = estimate_pallas([], chip, total_flops=flops, total_bytes=program.outside_bytes)
    return est, programs, facts


def analyze_job(kernel_path: str, reference: str, target: str = "tpu-v5e", size: str = "small") -> dict:
    """Pool job: an AnalysisReport as a JSON-able dict (the candidate's Python runs under the guard)."""
    from maxkernel.tpu_tools.judged import job_env
    from maxkernel.tpu_tools.judged.integrity import ESTIMATOR_MODULES, Guard

    job_env.scrub()
    guard = Guard([], extra_modules=ESTIMATOR_MODULES)
    report = run_analyze(kernel_path, reference, target, size, guard=guard)
    if guard.before:  # armed: the candidate was imported
        changed, reached = guard.check()
        if changed or reached:
            report.ok, report.estimate = False, None
            report.failure = Failure(
                kind="tampered", summary=f"the candidate tampered with the judge: {changed or reached}"[:1000]
            )
    return report.model_dump(mode="json")


def run_analyze(kernel_path: str, reference: str, target_name: str, size: str, guard=None) -> AnalysisReport:
    from maxkernel.tpu_tools.cost.llo_dump import enable_dump

    dump_root = enable_dump()  # before anything touches the TPU backend
    import jax

    from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
    from maxkernel.tpu_tools.hardware import execution
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.judged.classify import load_failure
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls
    from maxkernel.tpu_tools.problem.reference import load_candidate, load_reference

    report = AnalysisReport(ok=False, tier="model", kernel_path=kernel_path, target=target_name, size=size)
    try:
        target = parse_target(target_name)
        if target.kind != "tpu" or target.chip is None:
            raise UsageError(f"analyze needs a TPU target (tpu-v5e, tpu-v6e, ...), got {target_name!r}")
        ref = load_reference(reference)
        in_shapes = ref.input_shapes(size)
        if guard is not None:
            guard.hidden.append(os.path.realpath(ref.info.path))
            guard.arm()  # just before the candidate's code first runs
        cand = load_candidate(kernel_path)
    except (UsageError, CandidateLoadError) as e:
        report.failure = load_failure(e)
        return report
    report.kernel_sha256 = cand.sha256
    chip = target.chip
    report.vmem_capacity_bytes = chip.vmem_bytes
    try:
        args, scope = execution.aot_args(target, in_shapes, ref.info.mesh)
        with scope:
            calls = find_pallas_calls(jax.jit(cand.workload).trace(*args).jaxpr)
            t0 = time.perf_counter()
            est, programs, facts = estimate_one(
                cand.workload, args, calls, chip, dump_root, ref.per_device_flops(size)
            )
    except Exception as e:
        report.failure = Failure(kind="python_error", summary=f"trace failed: {type(e).__name__}: {e}"[:300])
        return report
    report.compile_ms = round(facts.get("compile_ms", (time.perf_counter() - t0) * 1e3), 1)
    report.analysis_ms = round(facts.get("parse_ms", 0.0), 1)
    limits = [c.vmem_limit_bytes for c in calls if c.vmem_limit_bytes]
    report.vmem_scoped_limit_bytes = max(limits) if limits else default_scoped_vmem_bytes(chip)
    report.kernels = [_program(p) for p in programs if p.is_kernel]
    report.xla_programs = [_program(p) for p in programs if not p.is_kernel]
    report.estimate = est
    if "vmem_needed" in facts:
        report.vmem_needed_bytes = int(facts["vmem_needed"])
        report.vmem_scoped_limit_bytes = int(facts["vmem_limit"])
        report.vmem_limit_to_fit_bytes = _limit_to_fit(report.vmem_needed_bytes, chip.vmem_bytes)
    if programs:
        report.tier, report.tier_note = "llo", f"read from libtpu's LLO dump ({len(programs)} programs)"
    else:
        report.tier_note = "no LLO dump: " + (facts.get("error", "").splitlines()[0][:200] or "none written")
    if "vmem_needed" in facts:
        fit = report.vmem_limit_to_fit_bytes
        report.failure = Failure(
            kind="vmem_exhausted",
            summary=f"needs {report.vmem_needed_bytes} B of VMEM, over the {report.vmem_scoped_limit_bytes} B scoped limit"
            + (f": vmem_limit_bytes={fit} would fit" if fit else ": more than the chip's VMEM"),
            message=facts["error"],
            stage="compile",
            requested_bytes=report.vmem_needed_bytes,
            capacity_bytes=report.vmem_scoped_limit_bytes,
        )
    elif "error" in facts:
        report.failure = Failure(
            kind="compile_error",
            summary=facts["error"].splitlines()[0][:300],
            message=facts["error"],
            stage="compile",
        )
    report.ok = report.failure is None
    report.summary = summarize(report)
    return report


def analyze_kernel(
    kernel_path: str,
    reference: str,
    target: str = "tpu-v5e",
    size: str = "small",
    *,
    evaluator: Any = None,
    timeout_s: float | None = None,
    on_progress: Any = None,
    cancel: Any = None,
) -> AnalysisReport:
    """Run `analyze_job` in a pool child (fresh libtpu, so the dump flags take) and return its report."""
    from maxkernel.tpu_tools.judge.evaluate import Evaluator, _abs_reference, outcome_failure

    ev = evaluator or Evaluator()
    path = str(Path(kernel_path).expanduser().resolve())
    outcome = ev.pool.submit(
        _spec(path, _abs_reference(reference), target, size, timeout_s or ev.timeout_s),
        on_progress=on_progress,
    )
    while True:
        done = outcome.wait(0.1)
        if done is not None:
            break
        if cancel is not None and cancel.is_set():
            outcome.cancel()
    if done.status == "ok" and done.result is not None:
        return AnalysisReport.model_validate(done.result)
    return AnalysisReport(
        ok=False,
        tier="model",
        kernel_path=path,
        target=target,
        size=size,
        failure=outcome_failure(done, "analyze"),
    )


def _spec(path: str, reference: str, target: str, size: str, timeout_s: float):
    from maxkernel.tpu_tools.pool.workers import JobSpec

    return JobSpec(
        fn="maxkernel.tpu_tools.cost.analyze:analyze_job",
        kwargs={"kernel_path": path, "reference": reference, "target": target, "size": size},
        timeout_s=timeout_s,
    )
