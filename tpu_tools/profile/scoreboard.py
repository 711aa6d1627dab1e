"""One row per task and the suite's score: the shape `maxkernel bench --json` and the suite both write.

A row holds a kernel's verdict and its time next to the XLA baseline's (and the expert Pallas
reference's) from the same tier: `measured` on a chip, or `estimate` (the static model) off it. A
speedup is computed only when both times share a tier, and the summary keeps one score per tier, so
an estimate never shares a geomean with a measurement. KernelBench's fast_p (share of all tasks that
are correct and at least p times faster) sits beside MaxKernel's ranking (per-task speedups, and how
many match or beat the expert reference), so the two can be compared line by line.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

Tier = Literal["measured", "estimate"]
MATCH_EXPERT_RATIO = 0.95  # within 5% of the expert's time counts as a match (timing noise, estimate error)


class FailedCase(BaseModel):
    """The check a task failed, named so a reader can re-run it: which case, at which size, how."""

    case: str = Field(description="'compile for tpu-v6e', 'seed 70001', 'tester case ragged_k', ...")
    size: str = Field(default="", description="the size it ran at (a tester case: its base and overrides)")
    kind: str = Field(default="", description="the verdict's failure kind")
    summary: str = Field(default="", description="the verdict's own one-line summary")


class TaskRow(BaseModel):
    """One task's result; `correct` and the speedups are what the score reads."""

    task: str
    status: str = Field(description="done | failed | pending | running | skipped")
    correct: bool = False
    correct_evidence: list[str] = Field(
        default_factory=list,
        description="the verdicts behind `correct` (fresh seeds, tester cases, re-verify)",
    )
    target: str = ""
    size: str = Field(default="", description="the target size: compiled, estimated and scored at it")
    input_shapes: list[str] = Field(default_factory=list, description="the reference's inputs at `size`")
    output_shapes: list[str] = Field(default_factory=list, description="the reference's outputs at `size`")
    check_sizes: list[str] = Field(
        default_factory=list, description="the sizes validation ran at (seeds, then each tester case)"
    )
    failed: FailedCase | None = Field(default=None, description="why a finished task is not correct")
    kernel_file: str | None = Field(default=None, description="the scored kernel, relative to the suite dir")
    verdict_file: str | None = Field(
        default=None, description="its verdicts (evaluation, tester cases) as JSON, relative to the suite dir"
    )
    tier: Tier | None = Field(default=None, description="where kernel_time_us and baseline_time_us came from")
    estimate_tier: str | None = Field(
        default=None, description="the estimator's tier (model, llo) if estimate"
    )
    kernel_time_us: float | None = None
    baseline_time_us: float | None = Field(default=None, description="XLA baseline (the task's workload)")
    baseline_tier: str | None = Field(
        default=None, description="the baseline's tier (measured, estimate/<estimator tier>) when known"
    )
    expert_time_us: float | None = Field(default=None, description="the expert Pallas reference, if any")
    expert_tier: str | None = Field(
        default=None, description="the expert's tier (measured, estimate/<estimator tier>) when known"
    )
    speedup_vs_baseline: float | None = Field(default=None, description="baseline / kernel, same tier")
    speedup_vs_expert: float | None = Field(default=None, description="expert / kernel, same tier")
    kernel_sha256: str | None = None
    kernel_label: str = Field(default="", description="which kernel: 'best of auto', 'pallas_reference', ...")
    spend_usd: float = 0.0
    evaluations: int = 0
    wall_time_s: float = 0.0
    hosts: list[str] = Field(
        default_factory=list, description="the hosts (or servers) that evaluated this task's kernels"
    )
    note: str = ""
    port: str | None = Field(
        default=None, description="a PyTorch source's port: its path and check ('torch.export (match)')"
    )
    source_parity: bool | None = Field(
        default=None, description="the scored kernel against the PyTorch source itself (interpret mode, CPU)"
    )
    source_parity_note: str = ""


def tier_time(profile: dict | None, target: str) -> tuple[float | None, str | None]:
    """(time_us, tier) of a profile report's candidate, for `target`.

    `measured` only when the candidate ran natively on the target chip itself (a CPU run of the XLA
    baseline is native too, but it says nothing about a TPU); otherwise the static estimate for the
    target, as `estimate/<its tier>` (`estimate/model`, `estimate/llo`) so two estimates compare only
    within one estimator tier; else nothing.
    """
    if not profile:
        return None, None
    native = profile.get("candidate_measured") and profile.get("candidate_execution") == "native"
    measured = (profile.get("measured") or {}).get("candidate") if native else None
    return _side_time(profile, measured, profile.get("static_estimate"), target)


def reference_tier_time(profile: dict | None, target: str) -> tuple[float | None, str | None]:
    """(time_us, tier) of the same report's reference: the XLA baseline, from the judge's own run of it.

    The reference is always timed natively; that is `measured` only on the target chip, otherwise its
    program's estimate (`reference_estimate`, costed by the candidate's estimator) stands in.
    """
    if not profile:
        return None, None
    measured = (profile.get("measured") or {}).get("reference")
    return _side_time(profile, measured, profile.get("reference_estimate"), target)


def _side_time(
    profile: dict, measured: dict | None, est: dict | None, target: str
) -> tuple[float | None, str | None]:
    from maxkernel.tpu_tools.hardware.chips import chip_for_device_kind

    chip = chip_for_device_kind(profile.get("measured_on") or "")
    if measured and chip is not None and chip.name == target:
        return float(measured["median_ms"]) * 1000.0, "measured"
    if est and est.get("estimated_time_us") is not None and est.get("chip") in (target, None):
        sub = est.get("tier")
        return float(est["estimated_time_us"]), f"estimate/{sub}" if sub else "estimate"
    return None, None


class VsXla(BaseModel):
    """A kernel's time beside XLA's for the same reference, on the same chip, each with its tier.

    A tier is `measured` or `estimate/<estimator tier>` (`estimate/llo`, `estimate/model`). The ratio is
    XLA / kernel; it is given between two estimates even when their estimator tiers differ (both named),
    never between a measurement and an estimate."""

    kernel_us: float
    kernel_tier: str
    xla_us: float
    xla_tier: str
    ratio: float | None = Field(default=None, description="xla_us / kernel_us (> 1: the kernel is faster)")
    chip: str = Field(default="", description="the target both were timed or estimated for")
    against: str = Field(
        default="XLA", description="what the reference is: 'XLA' (plain JAX) or 'baseline' (a Pallas kernel)"
    )

    def line(self) -> str:
        """`kernel X µs vs XLA Y µs (Z×), estimate (tier)`: both figures, the ratio, the tiers (`vs baseline`
        where the reference is itself a Pallas kernel)."""
        head = f"kernel {self.kernel_us:.4g} µs vs {self.against} {self.xla_us:.4g} µs"
        k_top, _, k_sub = self.kernel_tier.partition("/")
        x_top, _, x_sub = self.xla_tier.partition("/")
        if self.ratio is None:
            return (
                f"{head}: no ratio, kernel {_tier_words(self.kernel_tier)}, "
                f"{self.against} {_tier_words(self.xla_tier)}"
            )
        ratio = f"({self.ratio:.3g}×)"
        if k_top == "measured":
            return f"{head} {ratio}, measured"
        tiers = (
            k_sub if k_sub == x_sub else f"kernel {k_sub or 'unknown'}, {self.against} {x_sub or 'unknown'}"
        )
        return f"{head} {ratio}, estimate ({tiers})"


def _tier_words(tier: str) -> str:
    top, _, sub = tier.partition("/")
    return f"{top} ({sub})" if sub else top


def vs_xla(
    kernel: tuple[float | None, str | None], xla: tuple[float | None, str | None], chip: str = ""
) -> VsXla | None:
    """The pair from two (time_us, tier) sides (tier_time, reference_tier_time), or None if one is missing."""
    (k_us, k_tier), (x_us, x_tier) = kernel, xla
    if not k_us or not x_us or not k_tier or not x_tier:
        return None
    same_kind = k_tier.partition("/")[0] == x_tier.partition("/")[0]
    return VsXla(
        kernel_us=k_us,
        kernel_tier=k_tier,
        xla_us=x_us,
        xla_tier=x_tier,
        ratio=round(x_us / k_us, 4) if same_kind else None,
        chip=chip,
    )


def profile_vs_xla(profile: dict | None, target: str) -> VsXla | None:
    """A profile report's candidate beside its reference (the XLA baseline, or the Pallas baseline the
    reference is), for `target`."""
    chip = target.removeprefix("tpu-")
    vs = vs_xla(
        tier_time(profile, target),
        reference_tier_time(profile, target),
        f"tpu {chip}" if chip != target else target,
    )
    if vs is not None and ((profile or {}).get("reference") or {}).get("pallas"):
        vs.against = "baseline"
        if vs.kernel_tier != vs.xla_tier:  # a kernel against a kernel: no ratio across estimator tiers
            vs.ratio = None
    return vs


def row_vs_xla(row: TaskRow) -> VsXla | None:
    """A suite row's kernel beside its XLA baseline (the tiers it recorded)."""
    k_tier = f"estimate/{row.estimate_tier}" if row.tier == "estimate" and row.estimate_tier else row.tier
    return vs_xla(
        (row.kernel_time_us, k_tier), (row.baseline_time_us, row.baseline_tier or k_tier), row.target
    )


def timed_row(
    row: TaskRow,
    kernel: tuple[float | None, str | None],
    baseline: tuple[float | None, str | None],
    expert: tuple[float | None, str | None] | None = None,
) -> TaskRow:
    """Fill the times and speedups from (time_us, tier) pairs; a mixed-tier pair gives no speedup.

    A tier is `measured`, `estimate` or `estimate/<estimator tier>`; pairs must match exactly.
    """
    k_us, k_tier = kernel
    b_us, b_tier = baseline
    row.kernel_time_us, row.baseline_time_us = k_us, b_us
    row.baseline_tier = b_tier
    top, _, sub = (k_tier or "").partition("/")
    row.tier = top if top in ("measured", "estimate") else None  # type: ignore[assignment]
    row.estimate_tier = sub or None
    notes = [row.note] if row.note else []
    if k_us and b_us and k_tier == b_tier and row.tier is not None:
        row.speedup_vs_baseline = round(b_us / k_us, 4)
    elif k_us and b_us:
        notes.append(f"no speedup: kernel is {k_tier}, baseline is {b_tier}")
    if expert is not None:
        e_us, e_tier = expert
        row.expert_time_us, row.expert_tier = e_us, e_tier
        if k_us and e_us and e_tier == k_tier and row.tier is not None:
            row.speedup_vs_expert = round(e_us / k_us, 4)
        elif k_us and e_us:
            notes.append(f"no expert ratio: kernel is {k_tier}, expert is {e_tier}")
    row.note = "; ".join(notes)
    return row


class TierScore(BaseModel):
    """KernelBench's numbers for the rows of one tier (fast_p is over ALL tasks of the suite)."""

    tier: Tier
    rows: int = Field(description="correct rows with a speedup in this tier")
    fast_1: float = Field(description="share of all tasks correct and >= 1.0x the baseline, this tier")
    fast_1_2: float = Field(description="share of all tasks correct and >= 1.2x the baseline, this tier")
    geomean_speedup: float | None = Field(description="geometric mean over this tier's correct rows")


class RankedTask(BaseModel):
    task: str
    tier: Tier
    speedup_vs_baseline: float
    speedup_vs_expert: float | None = None


class SuiteScore(BaseModel):
    tasks: int
    finished: int
    correct: int
    fraction_correct: float
    by_tier: dict[str, TierScore]
    # MaxKernel's way: per-task speedups ranked, and the expert comparison.
    ranked: list[RankedTask]
    with_expert: int = Field(description="correct rows that have a same-tier expert ratio")
    match_or_beat_expert: int = Field(description=f"expert / kernel >= {MATCH_EXPERT_RATIO}")
    beat_expert: int = Field(description="expert / kernel > 1")


def fast_p(rows: list[TaskRow], p: float, tier: Tier) -> float:
    """Share of all rows that are correct and at least p times faster than the baseline in `tier`."""
    if not rows:
        return 0.0
    hits = sum(
        1
        for r in rows
        if r.correct and r.tier == tier and r.speedup_vs_baseline is not None and r.speedup_vs_baseline >= p
    )
    return hits / len(rows)


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def score(rows: list[TaskRow]) -> SuiteScore:
    """The summary: per tier, never mixing tiers; correctness over every task of the suite."""
    by_tier: dict[str, TierScore] = {}
    for tier in ("measured", "estimate"):
        timed = [r for r in rows if r.correct and r.tier == tier and r.speedup_vs_baseline is not None]
        if not timed:
            continue
        by_tier[tier] = TierScore(
            tier=tier,  # type: ignore[arg-type]
            rows=len(timed),
            fast_1=round(fast_p(rows, 1.0, tier), 4),  # type: ignore[arg-type]
            fast_1_2=round(fast_p(rows, 1.2, tier), 4),  # type: ignore[arg-type]
            geomean_speedup=round(g, 4) if (g := geomean([r.speedup_vs_baseline for r in timed])) else None,  # type: ignore[misc]
        )
    ranked = sorted(
        (
            RankedTask(
                task=r.task,
                tier=r.tier,
                speedup_vs_baseline=r.speedup_vs_baseline,
                speedup_vs_expert=r.speedup_vs_expert,
            )
            for r in rows
            if r.correct and r.tier is not None and r.speedup_vs_baseline is not None
        ),
        key=lambda t: (t.tier != "measured", -t.speedup_vs_baseline),
    )
    expert = [r.speedup_vs_expert for r in rows if r.correct and r.speedup_vs_expert is not None]
    correct = sum(1 for r in rows if r.correct)
    return SuiteScore(
        tasks=len(rows),
        finished=sum(1 for r in rows if r.status in ("done", "failed")),
        correct=correct,
        fraction_correct=round(correct / len(rows), 4) if rows else 0.0,
        by_tier=by_tier,
        ranked=ranked,
        with_expert=len(expert),
        match_or_beat_expert=sum(1 for s in expert if s >= MATCH_EXPERT_RATIO),
        beat_expert=sum(1 for s in expert if s > 1.0),
    )


def read_rows(doc: dict | str) -> list[TaskRow]:
    """The task rows of a suite's score.json / `--json` or of `maxkernel bench --json` (same shape)."""
    import json

    data = json.loads(doc) if isinstance(doc, str) else doc
    return [TaskRow.model_validate(r) for r in data["rows"]]
