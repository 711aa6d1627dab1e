"""Profile a candidate against its reference: timings a candidate cannot touch, a trace, an estimate.

This module is the judge (it runs in the caller's process: CLI, server, benchmark) and never imports
candidate or reference code. It runs three pool jobs in turn:

1. the reference's process (profile_reference.build_and_time_job) builds two warm-up sets and up to
   `reps` timed sets from seeds drawn here, and times the reference on them;
2. the candidate's process (profile_candidate.candidate_job) gets the warm-up sets as arrays in its
   scratch folder and the reference's output shapes as data; after it reports warm-up done, this
   process hands it one fresh timed set at a time (timed_loop.py), timestamping each hand-over and each
   `done`;
3. a second reference process times the reference again on the same sets: reference vs itself across
   processes is the noise floor, and it widens the speedup's CI.

Then, here: every timed output of the candidate is compared with the reference's (a kernel wrong while
timed gets no time); the candidate's clock is checked against this process's timestamps and its
fingerprints of the clock and `jax.block_until_ready` (`tampered`); a time below the chip's roofline
of the reference's work is `implausible`. A `speedup` appears only when both ran natively on one
device, never from TPU interpret mode (timed only on request, labeled). For TPU targets a
`static_estimate` (estimate.py) says what the chip should do; flops come from the reference, never
from a candidate's own `pl.CostEstimate`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.estimate import StaticEstimate
from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.hardware.chips import ChipSpec, chip_for_device_kind
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judge.compare import compare_outputs
from maxkernel.tpu_tools.judge.timing_checks import ClockCheck, DeviceCheck, Plausibility
from maxkernel.tpu_tools.judged import timed_loop
from maxkernel.tpu_tools.pool import handover
from maxkernel.tpu_tools.pool.jobs import JobOutcome, JobSpec
from maxkernel.tpu_tools.pool.sandbox import make_scratch_dir
from maxkernel.tpu_tools.problem.source import ReferenceInfo, sha256_file
from maxkernel.tpu_tools.problem.tolerances import choose_tolerance
from maxkernel.tpu_tools.profile.timing import NoiseFloor, SpeedupEstimate, Throughput, TimingStats
from maxkernel.tpu_tools.profile.trace_summary import TraceSummary
from maxkernel.tpu_tools.reports import Environment, Failure

INTERPRET_LABEL = "interpret mode — not representative"
DEFAULT_REPS = 30
WARMUP_SETS = 2
KEEP_DEFAULT_TRACES = 20
ProgressFn = Callable[[str], None]


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
    input_sets: int = Field(default=0, description="fresh timed input sets: each timed call sees a new one")
    warmup_sets: int = Field(
        default=0, description="input sets the candidate saw while warming up (never timed)"
    )
    fresh_inputs: bool = Field(
        default=False, description="timed sets differ from each other and from warm-up"
    )
    seeds_warmup: list[int] = []
    seeds_timed: list[int] = []
    processes: list[str] = Field(default_factory=list, description="which process did what (separation)")
    measured: dict[str, TimingStats] = Field(
        default_factory=dict, description="'reference', 'reference_repeat' and, when measured, 'candidate'"
    )
    candidate_measured: bool = False
    candidate_execution: Literal["native", "interpret"] | None = None
    candidate_not_measured_reason: str | None = None
    nothing_measured: str | None = Field(
        default=None,
        description="why nothing was measured: off the TPU target's chip at a size that is not a check size, "
        "a profile is the static estimates only",
    )
    interpret_timing_label: str | None = None
    timed_outputs_checked: int = Field(
        default=0, description="timed candidate outputs compared with the reference's"
    )
    clock_check: ClockCheck | None = None
    first_clock_check: ClockCheck | None = Field(
        default=None,
        description="a first candidate timing whose clock disagreed with the judge's: the candidate was timed "
        "once more in a fresh process, and only that timing counts (a tampering verdict must reproduce)",
    )
    device_check: DeviceCheck | None = None
    plausibility: Plausibility | None = None
    speedup: SpeedupEstimate | None = Field(
        default=None, description="only when both ran natively on one device and every check passed"
    )
    speedup_note: str = ""
    noise_floor: NoiseFloor | None = None
    throughput: ThroughputReport | None = None
    static_estimate: StaticEstimate | None = Field(default=None, description="labeled estimate; TPU targets")
    reference_estimate: StaticEstimate | None = Field(
        default=None,
        description="the reference's own program, estimated by the same code (the XLA baseline off the chip)",
    )
    trace_dir: str | None = None
    trace_path: str | None = None
    trace_summary: TraceSummary | None = None
    reference_trace_path: str | None = None
    failure: Failure | None = None
    warnings: list[str] = []
    environment: Environment | None = None
    wall_time_s: float | None = None


def default_trace_root() -> Path:
    """Where traces go without --trace-dir: kept for `maxkernel trace`, but only the newest few."""
    env = os.environ.get("MAXKERNEL_TRACE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "maxkernel" / "traces"


def _prune(root: Path, keep: int) -> None:
    captures = sorted(root.glob("profile-*"), key=lambda p: p.stat().st_mtime)
    for old in captures[: max(0, len(captures) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


class _Feeder:
    """Hands a timed child one fresh set at a time, on its own clock; records every protocol breach."""

    def __init__(
        self,
        source: Callable[[int, Path], None],
        scratch: Path,
        private: Path,
        n: int | None,
        forward: ProgressFn | None,
    ):
        self.source, self.scratch, self.private = source, scratch, private  # source(i, folder) writes set i
        self.n = n  # None: take the count from the child's ready message (the trusted reference only)
        self.forward = forward
        self.deliver: dict[int, float] = {}
        self.done: dict[int, float] = {}
        self.breaches: list[str] = []
        self.ready = False
        self._lock = threading.Lock()

    def _hand(self, i: int) -> None:
        tmp = self.private / f"feed-{self.scratch.name}-{i}"
        tmp.mkdir()
        self.source(i, tmp)
        self.deliver[i] = (
            time.perf_counter()
        )  # after writing, before the rename: the child cannot start earlier
        os.rename(tmp, timed_loop.set_dir(self.scratch, i))

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        with self._lock:
            try:
                if stage.startswith(timed_loop.READY):
                    if self.ready:
                        self.breaches.append("announced ready twice")
                        return
                    self.ready = True
                    if self.n is None:
                        self.n = int(stage.split()[-1])
                    if self.forward:
                        self.forward("measure")
                    if self.n:
                        self._hand(0)
                elif stage.startswith(timed_loop.DONE):
                    i = int(stage.split()[-1])
                    expected = len(self.done)
                    if (
                        not self.ready
                        or i != expected
                        or i not in self.deliver
                        or self.n is None
                        or i >= self.n
                    ):
                        self.breaches.append(f"announced call {i} done out of turn (expected {expected})")
                        return
                    self.done[i] = now
                    folder = timed_loop.set_dir(self.scratch, i)
                    if not (folder / f"{timed_loop.OUTPUTS}.json").is_file():
                        self.breaches.append(f"announced call {i} done before its outputs existed")
                    for f in folder.glob(f"{timed_loop.INPUTS}*"):  # at most one set on disk at a time
                        f.unlink()
                    if i + 1 < self.n:
                        self._hand(i + 1)
                elif self.forward:
                    self.forward(stage)
            except (OSError, ValueError) as e:
                self.breaches.append(f"protocol error at {stage!r}: {e}")


class _Runner:
    """Runs the jobs of one profile through the pool under one deadline and one cancel event."""

    def __init__(self, pool, deadline: float, cancel: threading.Event | None, needs_device: bool):
        self.pool, self.deadline, self.cancel, self.needs_device = pool, deadline, cancel, needs_device
        self.last: JobOutcome | None = None

    def run(
        self, fn: str, kwargs: dict, on_progress, scratch: Path, hide: list[str], *, off_chip: bool = False
    ) -> JobOutcome:
        """`off_chip`: this job never needs the chip, so on a TPU host it is a forked child."""
        left = max(self.deadline - time.monotonic(), 0.5)
        spec = JobSpec(
            fn=fn,
            kwargs=kwargs,
            timeout_s=left,
            needs_device=self.needs_device and not off_chip,
            scratch_dir=str(scratch),
            hide_paths=tuple(hide),
        )
        handle = self.pool.submit(spec, on_progress=on_progress)
        while True:
            outcome = handle.wait(0.05)
            if outcome is not None:
                self.last = outcome  # its sandbox is the one the verdict names (the candidate's, once it ran)
                return outcome
            if self.cancel is not None and self.cancel.is_set():
                handle.cancel()


def _job_failure(outcome: JobOutcome, what: str) -> Failure:
    from maxkernel.tpu_tools.judge.outcomes import outcome_failure

    return outcome_failure(outcome, what)


def run_profile(
    kernel_path: str,
    reference: str,
    target_name: str = "cpu",
    size: str = "small",
    *,
    pool=None,
    trace_dir: str | None = None,
    measure_interpret: bool = False,
    reps: int = DEFAULT_REPS,
    warmups: int = 3,
    warmup_min_time_s: float = 0.25,
    top: int = 15,
    timeout_s: float = 300.0,
    on_progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    needs_device: bool = False,
) -> ProfileReport:
    """Profile in three isolated processes (see the module docstring); always returns a report."""
    from maxkernel.tpu_tools.pool.workers import get_default_pool

    started = time.perf_counter()
    report = ProfileReport(ok=False, target=target_name, size=size, kernel_path=kernel_path)

    def finish(failure: Failure | None = None) -> ProfileReport:
        report.failure, report.ok = failure, failure is None
        report.wall_time_s = round(time.perf_counter() - started, 4)
        return report

    if reps < 1:
        return finish(Failure(kind="usage_error", summary=f"reps must be >= 1, got {reps}", stage="load"))
    try:
        tgt = parse_target(target_name)
    except UsageError as e:
        return finish(Failure(kind="usage_error", summary=str(e), stage="load"))
    kpath = Path(kernel_path).expanduser()
    if not kpath.is_file():
        return finish(
            Failure(kind="usage_error", summary=f"kernel file not found: {kernel_path}", stage="load")
        )
    report.kernel_sha256 = sha256_file(kpath)
    pool = pool or get_default_pool()
    runner = _Runner(pool, time.monotonic() + timeout_s, cancel, needs_device)
    # `work` holds the children's scratch folders (under the sandbox scratch root: every lane binds it);
    # `private` (elsewhere, a random name) what only this process reads.
    work = Path(make_scratch_dir("profile-"))
    private = Path(make_scratch_dir("judge-"))
    try:
        result = _run_jobs(
            report,
            finish,
            runner,
            work,
            private,
            str(kpath.resolve()),
            reference,
            tgt,
            size,
            trace_dir,
            measure_interpret,
            reps,
            warmups,
            warmup_min_time_s,
            top,
            on_progress,
        )
        from maxkernel.tpu_tools.judge.outcomes import stamp_sandbox

        return stamp_sandbox(result, runner.last) if runner.last is not None else result
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def _trace_logdirs(trace_dir: str | None) -> tuple[str | None, str | None]:
    """One capture folder per process (reference, candidate) under the trace root; the candidate's is newer."""
    try:
        root = Path(trace_dir) if trace_dir else default_trace_root()
        root.mkdir(parents=True, exist_ok=True)
        if not trace_dir:
            _prune(root, keep=KEEP_DEFAULT_TRACES - 2)
        return tempfile.mkdtemp(prefix="profile-ref-", dir=root), tempfile.mkdtemp(
            prefix="profile-cand-", dir=root
        )
    except OSError:
        return None, None


def _copy_from(staging: Path) -> Callable[[int, Path], None]:
    def write(i: int, folder: Path) -> None:
        for f in (staging / f"set_{i}").iterdir():
            shutil.copy(f, folder / f.name)

    return write


def _write_from(sets: list) -> Callable[[int, Path], None]:
    def write(i: int, folder: Path) -> None:
        handover.save_arrays(folder, timed_loop.INPUTS, sets[i])

    return write


def _run_jobs(
    report,
    finish,
    runner,
    work,
    private,
    kernel_path,
    reference,
    tgt,
    size,
    trace_dir,
    measure_interpret,
    reps,
    warmups,
    warmup_min_time_s,
    top,
    on_progress,
) -> ProfileReport:
    from maxkernel.tpu_tools.judged.timed_loop import CandidateSide
    from maxkernel.tpu_tools.profile.reference_side import SPECS_FILE, ReferenceSide, TimedSide

    staging, r1, r2 = private / "staging", private / "reference", private / "reference_repeat"
    cand_dir = work / "candidate"  # the only folder under `work`: nothing of the judge's beside it
    for d in (staging, r1, cand_dir, r2):
        d.mkdir()
    report.seeds_warmup = [secrets.randbelow(2**31) for _ in range(WARMUP_SETS)]
    report.seeds_timed = [secrets.randbelow(2**31) for _ in range(reps)]
    ref_log, cand_log = _trace_logdirs(trace_dir)
    say = on_progress or (lambda s: None)

    # 1. The reference's process: builds every set, times the reference; its outputs are the truth.
    say("reference: build inputs, time")
    feed_r1 = _Feeder(_copy_from(staging), r1, private, None, say)
    outcome = runner.run(
        "maxkernel.tpu_tools.profile.reference_side:build_and_time_job",
        {
            "reference": reference,
            "size": size,
            "warmup_seeds": report.seeds_warmup,
            "timed_seeds": report.seeds_timed,
            "staging_dir": str(staging),
            "scratch_dir": str(r1),
            "warmups": warmups,
            "warmup_min_time_s": warmup_min_time_s,
            "trace_dir": str(private / "trace") if ref_log else None,
            "top": top,
            "target": tgt.name,
        },
        feed_r1,
        private,  # the reference's one writable folder: staging, its timed sets, its trace
        [],
    )
    if outcome.status != "ok" or outcome.result is None:
        return finish(_job_failure(outcome, "reference run"))
    ref = ReferenceSide.model_validate(outcome.result)
    _move_trace(ref, private / "trace", ref_log)
    report.reference = ref.info
    report.warnings += ref.warnings
    report.measured_on = ref.measured_on
    report.environment = ref.environment
    report.reference_estimate = ref.static_estimate
    if ref.error:
        kind = "usage_error" if ref.error_is_usage else "internal_error"
        summary = ref.error if ref.error_is_usage else f"not the candidate's fault: {ref.error}"
        return finish(
            Failure(kind=kind, summary=summary[:1000], stage="load" if ref.error_is_usage else "run")
        )
    if ref.estimate_only:
        return _estimate_only(report, finish, runner, ref, kernel_path, reference, tgt, size, cand_dir, say)
    n = ref.timed_sets
    report.input_sets, report.warmup_sets = n, WARMUP_SETS
    report.fresh_inputs = bool(ref.info and ref.info.seedable)
    report.reference_trace_path = ref.trace_path
    report.processes.append(f"reference (job 1): built {WARMUP_SETS}+{n} input sets, timed the reference")
    # Inputs and expected outputs move into this process's memory: nothing the candidate could read ahead
    # of time (or copy an answer from) stays on disk while it runs.
    try:
        warm = [
            handover.load_arrays(staging, f"warmup_{i}", expect=ref.input_specs) for i in range(WARMUP_SETS)
        ]
        sets = [
            handover.load_arrays(staging / f"set_{i}", timed_loop.INPUTS, expect=ref.input_specs)
            for i in range(n)
        ]
        expected = [
            handover.load_arrays(timed_loop.set_dir(r1, i), timed_loop.OUTPUTS, expect=ref.output_specs)
            for i in range(n)
        ]
    except handover.HandoverError as e:
        return finish(
            Failure(kind="internal_error", summary=f"the reference's hand-over is broken: {e}", stage="run")
        )
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(r1, ignore_errors=True)

    def give_warmup(folder: Path) -> None:
        for i, arrays in enumerate(warm):
            handover.save_arrays(folder, f"warmup_{i}", arrays)
        handover.save_specs(folder / SPECS_FILE, ref.input_specs)

    # 2. The candidate's process: never given the reference, only arrays and shapes.
    from maxkernel.tpu_tools.judge.outcomes import hide_paths_for

    hide = [*hide_paths_for(reference, kernel_path), str(private)]
    mesh = ref.info.mesh if ref.info else None

    def time_candidate() -> tuple[CandidateSide, _Feeder] | Failure:
        """One candidate process: warm-up, its timed calls, its integrity evidence; a fresh scratch each time."""
        shutil.rmtree(cand_dir, ignore_errors=True)
        cand_dir.mkdir()
        if cand_log and Path(cand_log).is_dir():  # a second attempt's capture replaces the first's
            shutil.rmtree(cand_log, ignore_errors=True)
            Path(cand_log).mkdir()
        give_warmup(cand_dir)
        feed = _Feeder(_write_from(sets), cand_dir, private, n, say)
        outcome = runner.run(
            "maxkernel.tpu_tools.judged.profile_candidate:candidate_job",
            {
                **_candidate_args(ref, kernel_path, tgt, size, cand_dir, hide),
                "timed_sets": n,
                "measure_interpret": measure_interpret,
                "warmups": warmups,
                "warmup_min_time_s": warmup_min_time_s,
                "trace_dir": str(cand_dir / "trace") if cand_log else None,
                "top": top,
            },
            feed,
            cand_dir,
            hide,
            # a kernel over a mesh is estimated off the chip, never run here (profile_candidate): its child
            # needs no chip; both reference runs keep the device lane
            off_chip=mesh is not None,
        )
        if outcome.status != "ok" or outcome.result is None:
            return _job_failure(outcome, "candidate run")
        cand = CandidateSide.model_validate(outcome.result)
        _move_trace(cand, cand_dir / "trace", cand_log)
        report.kernel_sha256 = cand.kernel_sha256 or report.kernel_sha256
        report.execution = cand.execution
        report.has_pallas_call = cand.has_pallas_call
        report.static_estimate = cand.static_estimate
        report.candidate_not_measured_reason = cand.not_measured_reason
        report.warnings += [w for w in cand.warnings if w not in report.warnings]
        breach = _breach(outcome, cand)
        if breach is not None:
            if cand.samples_ms:  # evidence: what the parent's clock says about the candidate's own
                from maxkernel.tpu_tools.judge.timing_checks import clock_check, overheads

                ref_over = overheads(ref.samples_ms, feed_r1.deliver, feed_r1.done)
                report.clock_check = clock_check(cand.samples_ms, feed.deliver, feed.done, ref_over)
            return breach
        return cand.failure or (cand, feed)

    say("candidate: trace, compile, time")
    timed = time_candidate()
    if isinstance(timed, Failure):
        return finish(timed)
    cand, feed_c = timed
    report.processes.append("candidate (job 2): saw only arrays in its scratch folder and the output shapes")

    # 3. The reference again, in a fresh process: the noise floor spans processes, as the speedup does.
    def time_reference_again(folder: Path):
        give_warmup(folder)
        feed = _Feeder(_write_from(sets), folder, private, n, None)
        outcome = runner.run(
            "maxkernel.tpu_tools.profile.reference_side:time_job",
            {
                "reference": reference,
                "size": size,
                "scratch_dir": str(folder),
                "timed_sets": n,
                "warmups": warmups,
                "warmup_min_time_s": warmup_min_time_s,
            },
            feed,
            folder,
            [],
        )
        if outcome.status != "ok" or outcome.result is None:
            return _job_failure(outcome, "reference repeat run")
        return TimedSide.model_validate(outcome.result), feed

    say("reference again: noise floor")
    again = time_reference_again(r2)
    if isinstance(again, Failure):
        return finish(again)
    ref2, feed_r2 = again
    report.processes.append("reference again (job 3): timed the reference on the same sets")

    first = _candidate_clock(cand, feed_c, ref, ref2, feed_r1, feed_r2)
    if first is not None and not first.agrees:
        # A tampering verdict must be reproducible: a burst of load on the box during the candidate's few
        # timed calls (and not the reference's) looks like a slow clock once; a lying clock lies again.
        report.first_clock_check = first
        bad = _check_outputs(report, ref, expected, cand_dir)  # a wrong answer is not load: no second try
        if bad is not None:
            return finish(bad)
        report.timed_outputs_checked = 0
        say(
            f"candidate clock disagreed ({first.unexplained_ms:.3g} ms unexplained per call, tolerance "
            f"{first.tolerance_ms:.3g} ms): timing it again in a fresh process"
        )
        timed = time_candidate()
        if isinstance(timed, Failure):
            return finish(timed)
        cand, feed_c = timed
        report.processes.append(
            "candidate again (job 4): its first clock disagreed with the judge's; only this timing counts"
        )
        # the reference's noise beside the second timing, not only before the first: load that lasts
        # through the retry widens the honest child's left-over and the reference's alike (a lying clock's
        # excess does not move with the box)
        r3 = private / "reference_again"
        r3.mkdir(parents=True, exist_ok=True)
        again = time_reference_again(r3)
        if isinstance(again, Failure):
            return finish(again)
        ref2, feed_r2 = again
        report.processes.append(
            "reference again (job 5): timed beside the candidate's second timing; its noise is the one compared"
        )
    report.processes.append(
        "this process (never ran candidate or reference code): compared, checked, decided"
    )
    for log in (ref_log, cand_log):  # a capture folder nobody wrote into is not evidence: drop it
        if log and Path(log).is_dir() and not any(Path(log).iterdir()):
            Path(log).rmdir()
    say("compare timed outputs")
    return _judge(report, finish, ref, ref2, cand, feed_r1, feed_r2, feed_c, expected, cand_dir, tgt)


def _estimate_only(
    report, finish, runner, ref, kernel_path, reference, tgt, size, cand_dir, say
) -> ProfileReport:
    """The TPU target's chip is absent and the size is not a check size: nothing is built, run or timed.

    The reference's child gave its shapes and its own static estimate (abstract shapes); the candidate's
    child traces the candidate on the same abstract shapes, checks its output shapes and costs it.
    """
    from maxkernel.tpu_tools.judge.outcomes import hide_paths_for
    from maxkernel.tpu_tools.judged.timed_loop import CandidateSide

    report.nothing_measured = ref.estimate_only
    report.processes.append(
        "reference (job 1): its shapes and static estimate, on abstract shapes (nothing run)"
    )
    say("candidate: trace, estimate")
    hide = [*hide_paths_for(reference, kernel_path)]
    outcome = runner.run(
        "maxkernel.tpu_tools.judged.profile_candidate:candidate_job",
        {
            **_candidate_args(ref, kernel_path, tgt, size, cand_dir, hide),
            "timed_sets": 0,
            "estimate_only": ref.estimate_only,
            "input_values": ref.input_values or None,
        },
        say,
        cand_dir,
        hide,
        off_chip=True,
    )
    if outcome.status != "ok" or outcome.result is None:
        return finish(_job_failure(outcome, "candidate estimate"))
    cand = CandidateSide.model_validate(outcome.result)
    report.processes.append("candidate (job 2): traced and costed on the abstract shapes (nothing run)")
    report.kernel_sha256 = cand.kernel_sha256 or report.kernel_sha256
    report.execution = (
        f"estimate only: candidate and reference traced on abstract {size!r} shapes and costed for {tgt.name}; "
        "nothing executed, nothing timed"
    )
    report.has_pallas_call = cand.has_pallas_call
    report.static_estimate = cand.static_estimate
    report.candidate_not_measured_reason = cand.not_measured_reason or ref.estimate_only
    report.warnings += cand.warnings
    report.speedup_note = (
        "no measured speedup: nothing was measured (the static estimates of the candidate and the reference "
        "are the only numbers, each labeled with its tier)"
    )
    return finish(_breach(outcome, cand) or cand.failure)


def _candidate_args(ref, kernel_path, tgt, size, cand_dir: Path, hide: list[str]) -> dict:
    """What every candidate job is given: its kernel, the shapes as data, the reference's work (never its code)."""
    mesh = ref.info.mesh if ref.info else None
    return {
        "kernel_path": kernel_path,
        "target": tgt.name,
        "size": size,
        "scratch_dir": str(cand_dir),
        "input_specs": [s.model_dump(mode="json") for s in ref.input_specs],
        "output_specs": [s.model_dump(mode="json") for s in ref.output_specs],
        # one chip's share over a mesh: the estimate is per chip (the reference's flops, split)
        "reference_flops": mesh.share(ref.flops) if mesh else ref.flops,
        "io_bytes": _io_bytes(ref),
        "hide_paths": hide,
        "mesh": mesh.model_dump(mode="json") if mesh else None,
        "absent_inputs": list(getattr(ref, "absent_inputs", [])),
    }


def _breach(outcome, cand) -> Failure | None:
    """Integrity: the events the child streamed as they happened (a later lie cannot hide them), then its report."""
    from maxkernel.tpu_tools.judge.outcomes import integrity_evidence

    breach = integrity_evidence(outcome.progress)
    if breach is None and cand.reached:
        breach = Failure(kind="reached_reference", summary=cand.reached[:1000], stage="run")
    if breach is None and cand.tampered:
        what = "; ".join(t.removeprefix("the candidate ") for t in cand.tampered)
        breach = Failure(kind="tampered", summary=f"the candidate {what}"[:1000], stage="run")
    return breach


def _io_bytes(ref) -> int:
    def nbytes(specs) -> int:
        import numpy as np

        return int(sum(int(np.prod(s.shape)) * handover._np_dtype(s.dtype).itemsize for s in specs))

    return nbytes(ref.input_specs) + nbytes(ref.output_specs)


def _samples(side) -> list[float]:
    return side.device_samples_ms if side.device_samples_ms is not None else side.samples_ms


def _stats(side, key_note: str = ""):
    from maxkernel.tpu_tools.profile.timing import timing_stats

    if side.device_samples_ms is not None:
        return timing_stats(side.device_samples_ms, "device_trace", key_note)
    return timing_stats(side.samples_ms, "wall_clock", side.device_note or key_note)


def _check_outputs(report, ref, expected: list, cand_dir: Path) -> Failure | None:
    """Every timed output of the candidate against the reference's output on the same set."""
    n = len(expected)
    dtype = ref.output_specs[0].dtype if ref.output_specs else "float32"
    info = ref.info
    tol = choose_tolerance(dtype, ref_atol=info.atol if info else None, ref_rtol=info.rtol if info else None)
    for i in range(n):
        try:
            actual = handover.load_arrays(
                timed_loop.set_dir(cand_dir, i), timed_loop.OUTPUTS, expect=ref.output_specs
            )
        except handover.HandoverError as e:
            return Failure(
                kind="tampered",
                summary=f"timed call {i}: its outputs are missing or malformed: {e}",
                stage="compare",
            )
        result = compare_outputs(i, expected[i], actual, tol)
        report.timed_outputs_checked += 1
        if not result.ok:
            return Failure(
                kind="output_mismatch",
                summary=(
                    f"wrong while timed, so no time is reported: timed set {i + 1} of {n} has "
                    f"{result.mismatch_fraction:.2%} of elements outside atol={tol.atol:g} rtol={tol.rtol:g} "
                    f"(max abs err {result.max_abs_err:.3g}{f', {result.nan_count} NaN' if result.nan_count else ''})"
                ),
                stage="timed run",
            )
    return None


def _reference_overheads(ref, ref2, feed_r1, feed_r2) -> list[float]:
    from maxkernel.tpu_tools.judge.timing_checks import overheads

    return [
        o
        for side, feed in ((ref, feed_r1), (ref2, feed_r2))
        for o in overheads(side.samples_ms, feed.deliver, feed.done) or []
    ]


def _candidate_clock(cand, feed_c, ref, ref2, feed_r1, feed_r2):
    """The clock check of a candidate timing that is otherwise well-formed (else None: it fails on its own)."""
    from maxkernel.tpu_tools.judge.timing_checks import clock_check

    if cand.candidate_execution is None or feed_c.breaches or len(cand.samples_ms) != ref.timed_sets:
        return None
    return clock_check(
        cand.samples_ms, feed_c.deliver, feed_c.done, _reference_overheads(ref, ref2, feed_r1, feed_r2)
    )


def _judge(
    report, finish, ref, ref2, cand, feed_r1, feed_r2, feed_c, expected, cand_dir, tgt
) -> ProfileReport:
    from maxkernel.tpu_tools.judge.timing_checks import device_check, plausibility
    from maxkernel.tpu_tools.profile.timing import noise_floor, speedup, timing_stats

    n = ref.timed_sets
    report.measured = {"reference": _stats(ref), "reference_repeat": _stats(ref2)}
    report.noise_floor = noise_floor(report.measured["reference"], report.measured["reference_repeat"])
    _attach_trace(report, cand, ref)
    for feed, who in ((feed_r1, "reference"), (feed_r2, "reference repeat")):
        if feed.breaches:
            report.warnings.append(f"{who} timing protocol: {'; '.join(feed.breaches)}")
    if cand.candidate_execution is None:
        report.speedup_note = "no speedup: the candidate was not measured"
        _throughput(report, ref, tgt, [])
        return finish()
    report.candidate_execution = cand.candidate_execution
    if feed_c.breaches:
        return finish(
            Failure(
                kind="tampered",
                summary=f"timing protocol broken: {'; '.join(feed_c.breaches)}"[:1000],
                stage="run",
            )
        )
    if len(cand.samples_ms) != n:
        return finish(
            Failure(
                kind="tampered",
                summary=f"reported {len(cand.samples_ms)} timed calls, {n} were run",
                stage="run",
            )
        )
    bad = _check_outputs(report, ref, expected, cand_dir)
    if bad is not None:
        return finish(bad)
    report.clock_check = _candidate_clock(cand, feed_c, ref, ref2, feed_r1, feed_r2)
    if not report.clock_check.agrees:
        first = report.first_clock_check
        again = (
            f" (in two fresh processes: the first left {first.unexplained_ms:.3g} ms per call unexplained)"
            if first is not None
            else ""
        )
        return finish(
            Failure(
                kind="tampered",
                summary=f"clock disagrees with the judge's{again}: {report.clock_check.note}",
                stage="run",
            )
        )
    if cand.device_samples_ms is not None:
        report.device_check = device_check(
            cand.device_samples_ms, cand.samples_ms, report.clock_check.parent_window_ms
        )
        if not report.device_check.agrees:
            return finish(
                Failure(
                    kind="tampered",
                    summary=f"device time disagrees with wall time: {report.device_check.note}",
                    stage="run",
                )
            )
    stats = _stats(cand)
    report.candidate_measured = True
    if cand.candidate_execution == "interpret":
        stats.note = INTERPRET_LABEL
        report.measured["candidate"] = stats
        report.interpret_timing_label = INTERPRET_LABEL
        report.speedup_note = (
            "no speedup: the candidate ran in TPU interpret mode, which does not predict TPU time"
        )
        _throughput(report, ref, tgt, [])
        return finish()
    report.measured["candidate"] = stats
    chip = _local_chip(ref)
    report.plausibility = plausibility(
        stats.median_ms,
        ref.flops,
        float(_io_bytes(ref)),
        _peak_flops(chip),
        chip.hbm_bytes_per_s if chip else None,
        chip.name if chip else None,
    )
    _throughput(report, ref, tgt, ["candidate"])
    if not report.plausibility.plausible:
        report.candidate_measured = False
        return finish(Failure(kind="implausible", summary=report.plausibility.note, stage="run"))
    # The reference's samples are both of its processes' (before and after the candidate), pooled.
    both = timing_stats(_samples(ref) + _samples(ref2), stats.timing_source)
    report.speedup = speedup(both, stats, report.noise_floor)
    report.speedup_note = f"both ran natively on {report.measured_on}, in separate processes (reference = both of its runs pooled); CI widened by the noise floor"
    if tgt.kind == "tpu" and chip is None:
        report.speedup_note += f", not on {tgt.name}: it says nothing about the TPU"
    if not report.fresh_inputs:
        report.speedup.significant = False
        report.speedup_note += "; not significant by rule: identical input sets cannot exclude memoization"
    return finish()


def _peak_flops(chip: ChipSpec | None) -> float | None:
    if chip is None:
        return None
    return max(chip.peak_bf16_flops_per_s, chip.peak_int8_tops * 1e12)  # the most generous physical limit


def _local_chip(ref) -> ChipSpec | None:
    env = ref.environment
    if env is None or env.platform != "tpu":
        return None
    return chip_for_device_kind(env.device_kind)


def _throughput(report: ProfileReport, ref, tgt, extra: list[str]) -> None:
    from maxkernel.tpu_tools.profile.timing import throughput

    io_bytes = _io_bytes(ref)
    local_chip = _local_chip(ref)
    peak_chip = local_chip or tgt.chip
    platform = ref.environment.platform if ref.environment else "?"
    if local_chip is not None:
        label = f"measured on {local_chip.name}: fraction of its roofline"
    elif peak_chip is not None:
        label = (
            f"estimate: {platform} time relative to {peak_chip.name}'s peak (the chip is absent), "
            "not a measured TPU fraction"
        )
    else:
        label = f"no roofline: {platform} is not a known TPU chip"
    report.throughput = ThroughputReport(
        flops=ref.flops,
        flops_source=ref.flops_source,
        bytes_accessed=io_bytes,
        peak_chip=peak_chip.name if peak_chip else None,
        peak_label=label,
        per_function={
            k: throughput(
                ref.flops,
                io_bytes,
                report.measured[k].median_ms,
                peak_chip.peak_bf16_flops_per_s if peak_chip else None,
                peak_chip.hbm_bytes_per_s if peak_chip else None,
            )
            for k in ["reference", *extra]
        },
    )


def _move_trace(side, written: Path, logdir: str | None) -> None:
    """A child writes its capture inside its own scratch folder (all a sandbox lets it write); keep it in `logdir`."""
    if logdir is None or not written.is_dir():
        return
    for entry in written.iterdir():
        shutil.move(str(entry), logdir)
    old, new = str(written), logdir
    if side.trace_path and side.trace_path.startswith(old):
        side.trace_path = new + side.trace_path[len(old) :]
    if side.trace_summary is not None and side.trace_summary.source_file.startswith(old):
        side.trace_summary.source_file = new + side.trace_summary.source_file[len(old) :]
    if side.trace_summary is not None:
        side.trace_summary.text = side.trace_summary.text.replace(old, new)


def _attach_trace(report: ProfileReport, cand, ref) -> None:
    """The candidate's capture when it ran natively (else the reference's), as evidence beside the timings."""
    side = cand if cand.trace_summary is not None else ref
    if side.trace_summary is not None and side.trace_path:
        report.trace_path = side.trace_path
        report.trace_summary = side.trace_summary
        path = Path(side.trace_path)
        report.trace_dir = str(next((p for p in path.parents if p.name.startswith("profile-")), path.parent))
