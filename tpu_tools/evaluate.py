"""The evaluation facade: compile/validate a candidate through the worker pool, always returning a report.

A hang, crash, OOM or exit inside a child becomes a Failure in the report; the caller stays up.
Usable from threads (the MCP server) with a `cancel` event that kills the child.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from maxkernel.tpu_tools.input_cases import InputCase
from maxkernel.tpu_tools.pool import JobOutcome, JobSpec, WorkerPool, get_default_pool
from maxkernel.tpu_tools.reports import CompileReport, Failure, ValidationReport
from maxkernel.tpu_tools.sandbox import make_scratch_dir

if TYPE_CHECKING:
    from maxkernel.tpu_tools.profile import ProfileReport
    from maxkernel.tpu_tools.trace_summary import TraceSummary

DEFAULT_TIMEOUT_S = 300.0
_STATUS_KIND = {
    "timeout": "timeout",
    "crashed": "crash",
    "oom": "oom",
    "exited": "exited",
    "cancelled": "cancelled",
}

ProgressFn = Callable[[str], None]
R = TypeVar("R", bound=BaseModel)


def outcome_failure(outcome: JobOutcome, what: str) -> Failure:
    """A child that did not return a report: say exactly how it ended."""
    kind = _STATUS_KIND.get(outcome.status, "internal_error")
    summary = f"{what}: {outcome.message}"
    if kind == "internal_error":
        summary = f"{what} failed inside maxkernel (a bug, please report): {outcome.message}"
    return Failure(kind=kind, summary=summary, message=outcome.detail, stage="run")  # type: ignore[arg-type]


def _abs_reference(reference: str) -> str:
    p = Path(reference).expanduser()
    return str(p.resolve()) if p.exists() else reference


UNSANDBOXED_WARNING = "sandbox: none - this evaluation ran unsandboxed ({note})"


def stamp_sandbox(report: R, outcome: JobOutcome) -> R:
    """Every verdict names the sandbox its jobs ran in, as the pool (not the judged job) saw it."""
    info = outcome.sandbox
    if info is None or not hasattr(report, "environment"):
        return report
    if report.environment is None:  # type: ignore[attr-defined]
        from maxkernel.tpu_tools.env_info import host_environment

        report.environment = host_environment()  # type: ignore[attr-defined]
    report.environment.sandbox = info  # type: ignore[attr-defined]
    warnings = getattr(report, "warnings", None)
    if info.tier == "none" and isinstance(warnings, list):
        line = UNSANDBOXED_WARNING.format(note=info.note or "no OS sandbox on this host")
        if line not in warnings:
            warnings.append(line)
    return report


class Evaluator:
    """compile/validate entry points shared by the CLI, the MCP server and benchmarks."""

    def __init__(self, pool: WorkerPool | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.pool = pool or get_default_pool()
        self.timeout_s = timeout_s

    def _on_device(self, target: str) -> bool:
        """On a TPU host only the device-owning worker sees the chip: route every non-CPU job through it."""
        return bool(getattr(self.pool, "device_owner", False)) and target != "cpu"

    def _run(
        self,
        fn: str,
        kwargs: dict,
        *,
        timeout_s: float | None,
        on_progress: ProgressFn | None,
        cancel: threading.Event | None,
        needs_device: bool = False,
        scratch_dir: str | None = None,
    ) -> JobOutcome:
        spec = JobSpec(
            fn=fn,
            kwargs=kwargs,
            timeout_s=timeout_s or self.timeout_s,
            needs_device=needs_device,
            scratch_dir=scratch_dir,  # the sandbox lets the job write there and nowhere else
        )
        handle = self.pool.submit(spec, on_progress=on_progress)
        while True:
            outcome = handle.wait(0.1)
            if outcome is not None:
                return outcome
            if cancel is not None and cancel.is_set():
                handle.cancel()

    def _report(
        self,
        model: type[R],
        what: str,
        job: str,
        kwargs: dict,
        *,
        timeout_s: float | None,
        on_progress: ProgressFn | None,
        cancel: threading.Event | None,
        scratch_dir: str | None = None,
    ) -> R:
        """Run a one-child job returning a report; a child that ended otherwise becomes that report's failure."""
        started = time.perf_counter()
        if on_progress:
            on_progress(what)
        target = kwargs["target"]
        outcome = self._run(
            job,
            kwargs,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            needs_device=self._on_device(target),
            scratch_dir=scratch_dir,
        )
        if outcome.status == "ok" and outcome.result is not None:
            return stamp_sandbox(model.model_validate(outcome.result), outcome)
        report = model(
            ok=False,
            target=target,
            size=kwargs["size"],
            kernel_path=kwargs["kernel_path"],
            failure=outcome_failure(outcome, what),
            wall_time_s=round(time.perf_counter() - started, 4),
        )
        return stamp_sandbox(report, outcome)

    def compile(
        self,
        kernel_path: str,
        reference: str,
        target: str = "tpu-v6e",
        size: str = "small",
        *,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> CompileReport:
        kernel_path = str(Path(kernel_path).expanduser().resolve())
        kwargs = {
            "kernel_path": kernel_path,
            "reference": _abs_reference(reference),
            "target": target,
            "size": size,
        }
        return self._report(
            CompileReport,
            "compile",
            "maxkernel.tpu_tools.compile:compile_job",
            kwargs,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )

    def validate(
        self,
        kernel_path: str,
        reference: str,
        target: str = "cpu",
        size: str = "small",
        *,
        seeds: int | list[int] = 3,
        atol: float | None = None,
        rtol: float | None = None,
        allow_plain_jax: bool = False,
        allow_weak_check: bool = False,
        case: InputCase | None = None,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> ValidationReport:
        """Validate on `seeds`; with `case`, on that extra input case (both children build the same inputs)."""
        from maxkernel.tpu_tools.validate import merge_reports

        started = time.perf_counter()
        kernel_path = str(Path(kernel_path).expanduser().resolve())
        reference = _abs_reference(reference)
        seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
        case_dict = case.model_dump(mode="json") if case is not None else None
        out_dir = make_scratch_dir("validate-")
        try:
            outcome = self._run(
                "maxkernel.tpu_tools.validate:candidate_outputs_job",
                {
                    "kernel_path": kernel_path,
                    "reference": reference,
                    "target": target,
                    "size": size,
                    "seeds": seed_list,
                    "out_dir": out_dir,
                    "allow_plain_jax": allow_plain_jax,
                    "case": case_dict,
                },
                timeout_s=timeout_s,
                on_progress=on_progress,
                cancel=cancel,
                needs_device=self._on_device(target),
                scratch_dir=out_dir,
            )
            base = ValidationReport(
                ok=False, target=target, size=size, kernel_path=kernel_path, seeds=seed_list, case=case
            )
            if outcome.status != "ok" or outcome.result is None:
                base.failure = outcome_failure(outcome, "candidate run")
                base.wall_time_s = round(time.perf_counter() - started, 4)
                return stamp_sandbox(base, outcome)
            cand_side = ValidationReport.model_validate(outcome.result)
            cand_outcome = outcome
            if not cand_side.ok:
                cand_side.wall_time_s = round(time.perf_counter() - started, 4)
                return stamp_sandbox(cand_side, outcome)
            outcome = self._run(
                "maxkernel.tpu_tools.validate:reference_compare_job",
                {
                    "reference": reference,
                    "size": size,
                    "seeds": seed_list,
                    "out_dir": out_dir,
                    "atol": atol,
                    "rtol": rtol,
                    "allow_weak_check": allow_weak_check,
                    "case": case_dict,
                },
                timeout_s=timeout_s,
                on_progress=on_progress,
                cancel=cancel,
                needs_device=self._on_device(target),
                scratch_dir=out_dir,
            )
            if outcome.status != "ok" or outcome.result is None:
                cand_side.ok = False
                cand_side.failure = outcome_failure(outcome, "reference comparison")
                cand_side.wall_time_s = round(time.perf_counter() - started, 4)
                return stamp_sandbox(cand_side, outcome)
            merged = merge_reports(cand_side, ValidationReport.model_validate(outcome.result), started)
            return stamp_sandbox(merged, cand_outcome)  # the candidate's sandbox is the one that matters
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    # ---- profile (appended: the profile/trace issue) -----------------------------------------------
    def profile(
        self,
        kernel_path: str,
        reference: str,
        target: str = "cpu",
        size: str = "small",
        *,
        trace_dir: str | None = None,
        measure_interpret: bool = False,
        reps: int = 30,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> ProfileReport:
        """Time the candidate against the reference (interleaved), trace it and estimate it for the target."""
        from maxkernel.tpu_tools.profile import ProfileReport

        kernel_path = str(Path(kernel_path).expanduser().resolve())
        kwargs = {
            "kernel_path": kernel_path,
            "reference": _abs_reference(reference),
            "target": target,
            "size": size,
            "trace_dir": str(Path(trace_dir).expanduser().resolve()) if trace_dir else None,
            "measure_interpret": measure_interpret,
            "reps": reps,
        }
        from maxkernel.tpu_tools.profile import default_trace_root

        # The job writes its trace there and nowhere else (the sandbox binds it read-write).
        trace_root = Path(kwargs["trace_dir"]) if kwargs["trace_dir"] else default_trace_root()
        trace_root.mkdir(parents=True, exist_ok=True)
        # On a TPU host only the device-owning worker sees the chip; elsewhere children run on CPU.
        return self._report(
            ProfileReport,
            "profile",
            "maxkernel.tpu_tools.profile:profile_job",
            kwargs,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            scratch_dir=str(trace_root),
        )

    def estimate(
        self,
        kernel_path: str,
        reference: str,
        target: str = "tpu-v6e",
        size: str = "small",
        *,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ):
        """Static TPU estimate of a candidate (traced in a child; nothing compiled or run)."""
        from maxkernel.tpu_tools.autotune import EstimateReport
        from maxkernel.tpu_tools.estimate import StaticEstimate

        kernel_path = str(Path(kernel_path).expanduser().resolve())
        outcome = self._run(
            "maxkernel.tpu_tools.autotune:estimate_job",
            {
                "kernel_path": kernel_path,
                "reference": _abs_reference(reference),
                "target": target,
                "size": size,
            },
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )
        report = EstimateReport(ok=False, kernel_path=kernel_path, target=target, size=size)
        if outcome.status != "ok" or outcome.result is None:
            report.failure = outcome_failure(outcome, "estimate")
        elif not outcome.result.get("ok"):
            error = str(outcome.result.get("error", "unknown"))
            kind = "usage_error" if error.startswith("reference") else "python_error"
            report.failure = Failure(
                kind=kind, summary=f"no estimate: {error.splitlines()[0][:300]}", message=error
            )
        else:
            report.ok = True
            report.estimate = StaticEstimate.model_validate(outcome.result["estimate"])
            report.layout_problems = list(outcome.result.get("layout_problems") or [])
        return report

    def summarize_trace(self, path: str, top: int = 15) -> TraceSummary:
        return summarize_trace(path, top)


def summarize_trace(path: str, top: int = 15) -> TraceSummary:
    """Summarize a profiler trace file or logdir in this process (it is data: no child needed).

    Raises trace_summary.TraceFormatError (a ValueError) for missing, empty, corrupt or unknown files.
    """
    from maxkernel.tpu_tools.trace_summary import summarize_trace as _summarize

    p = Path(path).expanduser()
    if p.is_dir() and not (p / "plugins" / "profile").is_dir():
        # a `profile --trace-dir` folder holds one logdir per capture: take the newest capture
        runs = sorted(p.glob("*/plugins/profile/*/"), key=lambda d: d.stat().st_mtime)
        if runs:
            p = runs[-1]
    return _summarize(p, top=top)
