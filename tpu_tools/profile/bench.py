"""`maxkernel bench`: run JaxBench tasks' baselines and Pallas references through the evaluation core.

Each task is compiled for the target, its Pallas reference (if any) validated against the baseline, and both
profiled. One task's crash is one failed row, never the end of the run. Results go to results.json/.csv.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.profile.run import ProfileReport
from maxkernel.tpu_tools.profile.scoreboard import SuiteScore, TaskRow, score, timed_row


class BenchRow(BaseModel):
    task: str
    variant: Literal["baseline", "pallas_reference"]
    status: str = Field(description="'ok' or the failure kind of the first stage that failed")
    stage_failed: str | None = None
    message: str = ""
    size: str = Field(default="", description="the target size it was compiled, profiled and scored at")
    check_sizes: list[str] = Field(
        default_factory=list, description="where the Pallas reference was validated"
    )
    compiled: bool | None = None
    compiler: str | None = None
    compile_ms: float | None = None
    validated: bool | None = Field(
        default=None, description="Pallas reference vs baseline; None for the baseline"
    )
    median_ms: float | None = Field(default=None, description="measured natively on measured_on")
    measured_on: str | None = None
    timing_note: str = ""
    tflops: float | None = None
    roofline_fraction: float | None = None
    estimate_us: float | None = Field(default=None, description="static TPU estimate (labeled estimate)")
    estimate_bound: str | None = None
    estimate_tier: str | None = Field(default=None, description="the estimator's tier: model or llo")
    estimate_fraction_of_roofline: float | None = None
    wall_time_s: float = 0.0


class BenchResults(BaseModel):
    target: str
    size: str
    started_at: str
    rows: list[BenchRow] = Field(description="one per (task, variant)")
    out_dir: str
    task_rows: list[TaskRow] = Field(default_factory=list, description="one per task, the suite's row shape")
    score: SuiteScore | None = None

    def as_suite_json(self) -> dict:
        """`--json`: the suite's shape (`rows` of TaskRow and `score`), the variant rows beside them."""
        return {
            "target": self.target,
            "size": self.size,
            "rows": [r.model_dump(mode="json") for r in self.task_rows],
            "score": self.score.model_dump(mode="json") if self.score else None,
            "variants": [r.model_dump(mode="json") for r in self.rows],
            "out_dir": self.out_dir,
        }


def _tier_time(row: BenchRow | None, target_chip: str | None) -> tuple[float | None, str | None]:
    """Measured only when it ran natively on the target chip itself; else the labeled static estimate."""
    from maxkernel.tpu_tools.hardware.chips import chip_for_device_kind

    if row is None:
        return None, None
    chip = chip_for_device_kind(row.measured_on or "")
    if row.median_ms is not None and chip is not None and chip.name == target_chip:
        return row.median_ms * 1000.0, "measured"
    if row.estimate_us is None:
        return None, None
    return row.estimate_us, f"estimate/{row.estimate_tier}" if row.estimate_tier else "estimate"


def _full_id(task: str) -> str:
    from maxkernel.jaxbench import registry

    try:
        return registry.resolve_id(task)
    except registry.UnknownTaskError:
        return task


def task_rows(results: BenchResults) -> list[TaskRow]:
    """Per task: the Pallas reference as the kernel against the XLA baseline, from one tier."""
    from maxkernel.tpu_tools.hardware.targets import parse_target

    try:
        chip = parse_target(results.target).chip
    except Exception:
        chip = None
    chip_name = chip.name if chip is not None else None
    out: list[TaskRow] = []
    for task in dict.fromkeys(r.task for r in results.rows):
        variants = {r.variant: r for r in results.rows if r.task == task}
        base, ref = variants.get("baseline"), variants.get("pallas_reference")
        row = TaskRow(task=_full_id(task), status="done", target=results.target, size=results.size)
        row.wall_time_s = round(sum(r.wall_time_s for r in variants.values()), 3)
        if ref is None:
            row.status, row.note = "skipped", "no Pallas reference: baseline only"
            row.baseline_time_us = _tier_time(base, chip_name)[0]
        else:
            row.kernel_label = "pallas_reference"
            row.correct = ref.status == "ok" and ref.validated is True
            row.correct_evidence = ["pallas reference validated against the baseline"] if row.correct else []
            if ref.status != "ok":
                row.status, row.note = "failed", f"{ref.stage_failed}: {ref.status}: {ref.message}"[:500]
            timed_row(row, _tier_time(ref, chip_name), _tier_time(base, chip_name))
        out.append(row)
    return out


def _apply_profile(row: BenchRow, prof: ProfileReport, program: str) -> None:
    stats = prof.measured.get(program)
    if stats is not None:
        row.median_ms = round(stats.median_ms, 5)
        row.measured_on = prof.measured_on
        if program == "candidate" and prof.interpret_timing_label:
            row.timing_note = prof.interpret_timing_label
    elif prof.nothing_measured:  # neither program ran: off the chip at a size that is no check size
        row.timing_note = prof.nothing_measured
    elif program == "candidate" and prof.candidate_not_measured_reason:
        row.timing_note = prof.candidate_not_measured_reason
    if prof.throughput is not None and program in prof.throughput.per_function:
        t = prof.throughput.per_function[program]
        row.tflops = t.tflops
        row.roofline_fraction = t.roofline_fraction
    # the reference's own estimate for the baseline: the suite's XLA baseline comes from the same field
    est = (prof.reference_estimate if program == "reference" else None) or prof.static_estimate
    if est is not None:
        row.estimate_us = round(est.estimated_time_us, 3)
        row.estimate_bound = est.bound
        row.estimate_tier = getattr(est, "tier", None)
        row.estimate_fraction_of_roofline = round(est.fraction_of_roofline, 4)


def bench_variant(
    evaluator: Evaluator, task: str, variant: str, kernel_path: str, target: str, size: str | None, seeds: int
) -> BenchRow:
    """One row at the target size `size` (None: the task's production size); a Pallas reference is
    validated at the check sizes after its compile at the target size."""
    started = time.perf_counter()
    row = BenchRow(task=task, variant=variant, status="ok")  # type: ignore[arg-type]
    try:
        comp = evaluator.compile(kernel_path, task, target, size)
        size = row.size = comp.size  # the resolved target size: validate and profile use the same
        row.compiled, row.compiler = comp.ok, comp.compiler
        row.compile_ms = comp.times.compile_ms
        if not comp.ok:
            row.status, row.stage_failed, row.message = comp.failure.kind, "compile", comp.failure.summary
            return row
        if variant == "pallas_reference":
            val = evaluator.validate(kernel_path, task, target, size, seeds=seeds)
            row.validated = val.ok
            row.check_sizes = [c.size for c in val.checks if c.what == "validate"]
            if not val.ok:
                row.status, row.stage_failed, row.message = val.failure.kind, "validate", val.failure.summary
                return row
        prof = evaluator.profile(kernel_path, task, target, size)
        if not prof.ok and prof.failure is not None:
            row.status, row.stage_failed, row.message = prof.failure.kind, "profile", prof.failure.summary
        # the baseline is timed as the profile's reference; the Pallas kernel as its candidate
        _apply_profile(row, prof, "reference" if variant == "baseline" else "candidate")
    except Exception as e:  # a bug in one row must not end the run
        row.status, row.message = "internal_error", f"{type(e).__name__}: {e}"
    finally:
        row.wall_time_s = round(time.perf_counter() - started, 3)
    return row


def run_bench(
    task_ids: list[str],
    *,
    target: str = "cpu",
    size: str | None = None,
    out_dir: str = "jaxbench-results",
    seeds: int = 2,
    evaluator: Evaluator | None = None,
    on_row: Callable[[str, str], None] | None = None,
) -> BenchResults:
    from maxkernel.jaxbench import registry

    evaluator = evaluator or Evaluator()
    results = BenchResults(
        target=target,
        size=size or "production",
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
        rows=[],
        out_dir="",
    )
    for task in task_ids:
        variants = [("baseline", str(registry.task_path(task)))]
        ref = registry.pallas_reference_path(task)
        if ref is not None:
            variants.append(("pallas_reference", str(ref)))
        for variant, path in variants:
            if on_row:
                on_row(task, variant)
            results.rows.append(bench_variant(evaluator, task, variant, path, target, size, seeds))
    if size is None:  # the production size each task resolved to
        results.size = ", ".join(dict.fromkeys(r.size for r in results.rows if r.size)) or "production"
    results.task_rows = task_rows(results)
    results.score = score(results.task_rows)
    results.out_dir = str(write_results(results, Path(out_dir)))
    return results


def write_results(results: BenchResults, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(results.model_dump_json(indent=2))
    (out_dir / "score.json").write_text(json.dumps(results.as_suite_json(), indent=2))
    with open(out_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(BenchRow.model_fields))
        writer.writeheader()
        for row in results.rows:
            writer.writerow(json.loads(row.model_dump_json()))
    return out_dir.resolve()
