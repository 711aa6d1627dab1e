"""Profile a candidate against its reference (runs in a pool child): honest timings, a trace, an estimate.

A number only goes in the report when it means what it says. The reference is timed twice, interleaved
with the candidate on rotating inputs, so `noise_floor` shows how far two identical programs differ
here. A `speedup` appears only when reference and candidate both ran natively on the same device; a
Pallas kernel whose chip is absent runs in TPU interpret mode, which is not measured unless asked
(`measure_interpret`) and then carries a label and no speedup. For TPU targets a `static_estimate`
(the pipeline model of estimate.py, or the roofline of XLA's cost analysis for plain JAX) says what
the chip should do. Natively run programs are traced; the trace is kept and summarized.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools import execution
from maxkernel.tpu_tools.chips import ChipSpec, chip_for_device_kind
from maxkernel.tpu_tools.classify import classify_exception, load_failure
from maxkernel.tpu_tools.compile import cost_analysis_of
from maxkernel.tpu_tools.env_info import seal
from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
from maxkernel.tpu_tools.estimate import StaticEstimate, estimate_pallas
from maxkernel.tpu_tools.problem import ReferenceInfo, load_candidate, load_reference
from maxkernel.tpu_tools.reports import Environment, Failure
from maxkernel.tpu_tools.targets import parse_target
from maxkernel.tpu_tools.timing import NoiseFloor, SpeedupEstimate, Throughput, TimingStats
from maxkernel.tpu_tools.trace_summary import TraceSummary

INTERPRET_LABEL = "interpret mode — not representative"
DEFAULT_REPS = 30
DEFAULT_SEEDS = (0, 1)
TRACE_CALLS = 2  # calls per program inside the profiler trace (the trace is evidence, not the timing)


class ThroughputReport(BaseModel):
    """Achieved rates of the natively measured programs, from the reference's work and I/O."""

    flops: float | None
    flops_source: str = Field(description="'get_flops', 'XLA cost analysis of the reference' or 'unknown'")
    bytes_accessed: int = Field(description="bytes of the inputs + outputs (each touched once)")
    peak_chip: str | None = Field(description="chip whose peaks the roofline fraction is relative to")
    peak_label: str = Field(
        description="whether the fraction is measured-on-chip or an estimate vs a target peak"
    )
    per_function: dict[str, Throughput]


class ProfileReport(BaseModel):
    """How fast is the candidate, against what noise, and what should the target chip do?"""

    kind: Literal["profile"] = "profile"
    ok: bool
    target: str
    size: str
    kernel_path: str
    kernel_sha256: str | None = None
    reference: ReferenceInfo | None = None
    execution: str = Field(default="", description="how the target is served here")
    measured_on: str | None = Field(default=None, description="device kind the native timings ran on")
    has_pallas_call: bool | None = None
    input_sets: int = Field(default=0, description="distinct input sets rotated between reps")
    measured: dict[str, TimingStats] = Field(
        default_factory=dict, description="'reference', 'reference_repeat' and, when measured, 'candidate'"
    )
    candidate_measured: bool = False
    candidate_execution: Literal["native", "interpret"] | None = None
    candidate_not_measured_reason: str | None = None
    interpret_timing_label: str | None = None
    speedup: SpeedupEstimate | None = Field(
        default=None, description="only when both ran natively on one device"
    )
    speedup_note: str = ""
    noise_floor: NoiseFloor | None = None
    throughput: ThroughputReport | None = None
    static_estimate: StaticEstimate | None = Field(default=None, description="labeled estimate; TPU targets")
    trace_dir: str | None = None
    trace_path: str | None = None
    trace_summary: TraceSummary | None = None
    failure: Failure | None = None
    warnings: list[str] = []
    environment: Environment | None = None
    wall_time_s: float | None = None


def profile_job(
    kernel_path: str,
    reference: str,
    target: str = "cpu",
    size: str = "small",
    trace_dir: str | None = None,
    measure_interpret: bool = False,
    reps: int = DEFAULT_REPS,
    warmups: int = 3,
    min_time_s: float = 0.1,
    seeds: list[int] | None = None,
    top: int = 15,
) -> dict:
    """Pool job: returns a ProfileReport as a JSON-able dict."""
    return run_profile(
        kernel_path,
        reference,
        target,
        size,
        trace_dir=trace_dir,
        measure_interpret=measure_interpret,
        reps=reps,
        warmups=warmups,
        min_time_s=min_time_s,
        seeds=list(seeds or DEFAULT_SEEDS),
        top=top,
    ).model_dump(mode="json")


def _named(fn: Callable, name: str) -> Callable:
    """A wrapper with a chosen __name__, so the HLO module (and trace rows) read jit_<name>."""

    def call(*args):
        return fn(*args)

    call.__name__ = call.__qualname__ = name
    return call


def _nbytes(tree) -> int:
    import jax
    import numpy as np

    return int(
        sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree))
    )


def _specs(tree) -> list[tuple[tuple[int, ...], str]]:
    import jax

    return [(tuple(x.shape), str(x.dtype)) for x in jax.tree_util.tree_leaves(tree)]


KEEP_DEFAULT_TRACES = 20


def default_trace_root() -> Path:
    """Where traces go without --trace-dir: kept for `maxkernel trace`, but only the newest few."""
    env = os.environ.get("MAXKERNEL_TRACE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "maxkernel" / "traces"


def _prune(root: Path, keep: int) -> None:
    captures = sorted(root.glob("profile-*"), key=lambda p: p.stat().st_mtime)
    for old in captures[: max(0, len(captures) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def run_profile(
    kernel_path: str,
    reference: str,
    target_name: str,
    size: str,
    *,
    trace_dir: str | None = None,
    measure_interpret: bool = False,
    reps: int = DEFAULT_REPS,
    warmups: int = 3,
    min_time_s: float = 0.1,
    seeds: list[int] | None = None,
    top: int = 15,
) -> ProfileReport:
    import jax

    from maxkernel.tpu_tools.pallas_info import find_pallas_calls
    from maxkernel.tpu_tools.pool import report_progress
    from maxkernel.tpu_tools.timing import measure_interleaved, noise_floor, speedup, throughput

    started = time.perf_counter()
    report = ProfileReport(ok=False, target=target_name, size=size, kernel_path=kernel_path)

    def finish(failure: Failure | None = None) -> ProfileReport:
        return seal(report, started, failure)

    try:
        tgt = parse_target(target_name)
        ref = load_reference(reference)
        report.reference = ref.info
        cand = load_candidate(kernel_path)
    except (UsageError, CandidateLoadError) as e:
        return finish(load_failure(e))
    report.kernel_sha256 = cand.sha256
    path = Path(cand.path)
    plan = execution.plan_for(tgt)
    report.execution = plan.description
    device = jax.devices()[0]
    report.measured_on = f"{device.platform} ({device.device_kind})"

    # Inputs: >= 2 seeds so nothing can cache a result across reps.
    seeds = list(seeds or DEFAULT_SEEDS)
    try:
        input_sets = [ref.create_inputs(size, s) for s in seeds]
        shapes = ref.input_shapes(size)
        expected = jax.eval_shape(ref.workload, *shapes)
    except UsageError as e:
        return finish(load_failure(e))
    report.input_sets = len(input_sets)
    if not ref.info.seedable:
        report.warnings.append("the reference is not seedable: the rotated input sets are identical")

    # Trace the candidate (as if on the target chip when it is absent, so the estimate sees its shapes).
    report_progress("trace")
    aot_tpu = tgt.kind == "tpu" and not plan.native
    try:
        with execution.abstract_tpu_mesh(tgt) if aot_tpu else contextlib.nullcontext():
            jaxpr = jax.make_jaxpr(cand.workload)(*shapes)
    except Exception as e:
        return finish(classify_exception(e, "trace", path))
    calls = find_pallas_calls(jaxpr)
    report.has_pallas_call = bool(calls)
    got = _specs(jaxpr.out_avals)
    if got != _specs(expected):
        fmt = lambda specs: ", ".join(f"{d}{list(s)}" for s, d in specs)  # noqa: E731
        return finish(
            Failure(
                kind="shape_mismatch",
                summary=f"output {fmt(got)} differs from the reference's {fmt(_specs(expected))}",
                stage="trace",
            )
        )

    # The reference always runs natively. A failing reference is not the candidate's fault: say so.
    report_progress("compile reference")
    try:
        ref_compiled = jax.jit(_named(ref.workload, "reference")).lower(*input_sets[0]).compile()
    except Exception as e:
        f = classify_exception(e, "compile")
        f.kind, f.summary = "internal_error", f"the reference failed to compile: {f.summary}"
        return finish(f)
    ref_fn = _named(ref_compiled, "reference")

    # The candidate: natively when it is plain JAX or its chip is here; else interpret mode, on request.
    native = plan.native or not calls
    with contextlib.ExitStack() as interp:  # the interpreter's state lives inside this scope
        if not native and measure_interpret:
            interp.enter_context(execution.tpu_interpret_mode())
        cand_fn, cand_cost, failure = _compile_candidate(
            cand.workload, input_sets[0], path, native, measure_interpret
        )
        if failure is not None:
            return finish(failure)
        if cand_fn is not None:
            report.candidate_execution = "native" if native else "interpret"
        else:
            report.candidate_not_measured_reason = (
                f"not measured: target chip absent (Pallas kernel runs in interpret mode on {device.platform.upper()}); "
                "pass measure_interpret to time it anyway (not representative)"
            )
        if not calls and not plan.native:
            report.execution = (
                f"plain JAX (no pallas_call): runs natively on {device.platform}; {plan.description}"
            )
        report_progress("measure")
        fns = {"reference": ref_fn, "reference_repeat": ref_fn}
        if cand_fn is not None:
            fns["candidate"] = cand_fn
        try:
            report.measured = measure_interleaved(
                fns, input_sets, warmups=warmups, reps=reps, min_time_s=min_time_s
            )
        except Exception as e:
            return finish(classify_exception(e, "run", path))
    report.candidate_measured = cand_fn is not None
    report.noise_floor = noise_floor(report.measured["reference"], report.measured["reference_repeat"])
    if report.candidate_execution == "interpret":
        report.interpret_timing_label = INTERPRET_LABEL
        report.measured["candidate"].note = INTERPRET_LABEL
        report.speedup_note = (
            "no speedup: the candidate ran in TPU interpret mode, which does not predict TPU time"
        )
    elif report.candidate_execution == "native":
        report.speedup = speedup(report.measured["reference"], report.measured["candidate"])
        report.speedup_note = f"both ran natively on {report.measured_on}"
        if tgt.kind == "tpu" and not plan.native:
            report.speedup_note += f", not on {tgt.name}: it says nothing about the TPU"
    else:
        report.speedup_note = "no speedup: the candidate was not measured"

    # Throughput of the native programs.
    ref_cost = cost_analysis_of(ref_compiled)
    flops_source = "get_flops"
    try:
        flops: float | None = ref.get_flops(size)
    except Exception:
        flops = None
    if flops is None:
        flops, flops_source = ref_cost.get("flops"), "XLA cost analysis of the reference"
        if flops is None:
            flops_source = "unknown"
    io_bytes = _nbytes(input_sets[0]) + _nbytes(expected)
    local_chip = chip_for_device_kind(device.device_kind) if device.platform == "tpu" else None
    peak_chip: ChipSpec | None = local_chip or tgt.chip
    if local_chip is not None:
        peak_label = f"measured on {local_chip.name}: fraction of its roofline"
    elif peak_chip is not None:
        peak_label = (
            f"estimate: {device.platform} time relative to {peak_chip.name}'s peak (the chip is absent), "
            "not a measured TPU fraction"
        )
    else:
        peak_label = f"no roofline: {device.platform} is not a known TPU chip"
    native_keys = ["reference"] + (["candidate"] if report.candidate_execution == "native" else [])

    report.throughput = ThroughputReport(
        flops=flops,
        flops_source=flops_source,
        bytes_accessed=io_bytes,
        peak_chip=peak_chip.name if peak_chip else None,
        peak_label=peak_label,
        per_function={
            k: throughput(
                flops,
                io_bytes,
                report.measured[k].median_ms,
                peak_chip.peak_bf16_flops_per_s if peak_chip else None,
                peak_chip.hbm_bytes_per_s if peak_chip else None,
            )
            for k in native_keys
        },
    )

    # Static estimate for the target chip (or the local TPU when the target is cpu/local).
    est_chip = tgt.chip or local_chip
    if est_chip is not None:
        try:
            if calls:
                from maxkernel.tpu_tools.jaxpr_cost import program_cost  # after timing: the whole program

                report.static_estimate = estimate_pallas(
                    calls, est_chip, total_flops=flops, program=program_cost(jaxpr)
                )
            else:
                report.static_estimate = estimate_pallas(
                    [],
                    est_chip,
                    total_flops=cand_cost.get("flops", flops or 0.0),
                    total_bytes=cand_cost.get("bytes accessed", float(io_bytes)),
                )
        except Exception as e:
            report.warnings.append(f"no static estimate: {type(e).__name__}: {e}")

    # A short trace of the natively run programs, in its own logdir.
    report_progress("trace capture")
    traced = {k: f for k, f in fns.items() if k != "reference_repeat" and (k != "candidate" or native)}
    _capture_trace(report, traced, input_sets, trace_dir, top)
    return finish()


def _compile_candidate(
    workload: Callable, args: tuple, path: Path, native: bool, measure_interpret: bool
) -> tuple[Callable | None, dict[str, float], Failure | None]:
    """(callable, XLA cost analysis, failure): compiled and run once, so its errors are classified here."""
    import jax

    from maxkernel.tpu_tools.pool import report_progress

    if not (native or measure_interpret):
        return None, {}, None
    report_progress("compile candidate")
    stage = "lower"
    try:
        lowered = jax.jit(_named(workload, "candidate")).lower(*args)
        stage = "compile"
        compiled = lowered.compile()
        stage = "run"
        jax.block_until_ready(compiled(*args))
    except Exception as e:
        return None, {}, classify_exception(e, stage, path)
    return _named(compiled, "candidate"), (cost_analysis_of(compiled) if native else {}), None


def _capture_trace(
    report: ProfileReport, fns: dict[str, Callable], input_sets: list, trace_dir: str | None, top: int
):
    import jax

    from maxkernel.tpu_tools.trace_summary import TraceFormatError, resolve_trace_file, summarize_trace

    try:
        root = Path(trace_dir) if trace_dir else default_trace_root()
        root.mkdir(parents=True, exist_ok=True)
        if not trace_dir:
            _prune(root, keep=KEEP_DEFAULT_TRACES - 1)
        logdir = tempfile.mkdtemp(prefix="profile-", dir=root)
        with jax.profiler.trace(logdir):
            for i in range(TRACE_CALLS):
                for fn in fns.values():
                    jax.block_until_ready(fn(*input_sets[i % len(input_sets)]))
        report.trace_dir = logdir
        report.trace_path = str(resolve_trace_file(logdir))
        report.trace_summary = summarize_trace(logdir, top=top)
    except (TraceFormatError, OSError, RuntimeError) as e:
        report.warnings.append(f"no trace summary: {type(e).__name__}: {e}")
