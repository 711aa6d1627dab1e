"""The model run's one report: per-region rows and the whole step's end-to-end estimate (JSON + text).

Every time in it is a static estimate at the target size (hotspots for the step and the regions, the
kernel's own estimate for what replaces them); nothing here is measured, and the text says so.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.profile.scoreboard import VsXla

REPORT_JSON, REPORT_TEXT = "model_report.json", "model_report.txt"


class RegionRow(BaseModel):
    region: str
    count: int
    share: float = Field(description="the region's share of the step (hotspots, estimate)")
    before_us: float = Field(description="the region's hotspot estimate x count")
    after_us: float | None = Field(
        None, description="its kernel's static estimate x count; None: not replaced"
    )
    speedup: float | None = None
    reference: str | None = Field(
        None, description="the extracted reference the suite optimized (None: not extracted)"
    )
    kernel: str | None = Field(None, description="the region's best kernel that validated, if any")
    verdict: str = Field(description="the suite's verdict on the region's kernel, from what ran")
    outcome: Literal["in_step", "no_valid_kernel", "not_faster", "not_extracted", "not_composed"] = Field(
        "no_valid_kernel",
        description="in_step: its kernel is in the composed step; every other outcome keeps the region as the "
        "model has it: no kernel validated, the kernel does not beat the region, the region could not be "
        "extracted (a tool limitation, said in the verdict), or the composed step did not match with it",
    )
    in_step: bool = Field(False, description="the kernel is in the composed step's estimate")
    vs_xla: VsXla | None = Field(
        None,
        description="the suite's row: its kernel beside XLA's baseline for the extracted reference, tiers",
    )


class ModelReport(BaseModel):
    kind: Literal["model_run"] = "model_run"
    model: str
    run_dir: str
    mode: str
    target: str
    size: str = Field(description="the target size: hotspots, kernels and the step are estimated at it")
    check_sizes: list[str] = Field(description="where the suite and compose validated (interpret mode)")
    basis: Literal["estimate"] = "estimate"
    tier: str
    step_before_us: float
    step_after_us: float
    speedup: float = Field(description="step_before_us / step_after_us: an end-to-end estimate")
    arithmetic: str
    composed_us: float | None = Field(
        None,
        description="the composed step compiled and estimated as one program (estimate), beside Amdahl's",
    )
    composed_speedup: float | None = Field(None, description="step_before_us / composed_us (estimate)")
    composed_note: str = ""
    regions: list[RegionRow]
    composed: dict[str, Any] | None = Field(None, description="compose's verdict and path, when it ran")
    notes: list[str] = Field(default_factory=list)
    port: dict[str, Any] | None = Field(
        None, description="a PyTorch source: the port's source, the path that made it, its check"
    )
    source_parity: dict[str, Any] | None = Field(
        None, description="a PyTorch source: the composed step against the source itself (ok, summary)"
    )


def text(r: ModelReport) -> str:
    lines = [
        f"model {r.model} on {r.target} at size {r.size} ({r.mode}; checked at {', '.join(r.check_sizes)})",
        f"{'region':<28} {'x':>3} {'share':>7} {'before us':>11} {'after us':>11} {'speedup':>8}  verdict",
    ]
    for g in r.regions:
        after = "-" if g.after_us is None else f"{g.after_us:.4g}"
        sp = "-" if g.speedup is None else f"{g.speedup:.2f}x"
        lines.append(
            f"{g.region:<28} {g.count:>3} {100 * g.share:>6.1f}% {g.before_us:>11.4g} {after:>11} {sp:>8}  "
            f"{g.outcome}: {g.verdict}"
        )
        if g.reference:
            lines.append(
                f"{'':<28}     reference {g.reference}" + (f"; kernel {g.kernel}" if g.kernel else "")
            )
        if g.vs_xla is not None:
            lines.append(f"{'':<28}     {g.vs_xla.line()}")
    if r.composed:
        lines.append(f"composed step: {r.composed.get('verdict')} ({r.composed.get('path')})")
    lines.append(
        f"step: {r.step_before_us:.4g} us -> {r.step_after_us:.4g} us, {r.speedup:.3g}x end to end "
        f"(estimate; {r.tier}; nothing measured)"
    )
    lines.append(f"  {r.arithmetic}")
    if r.composed_note:
        lines.append(f"  {r.composed_note}")
    if r.port:
        lines.append(f"port: {r.port.get('path')} ({r.port.get('check')}) from {r.port.get('source')}")
        lines.append(f"source parity: {(r.source_parity or {}).get('summary', 'not judged')}")
    lines += [f"  note: {n}" for n in r.notes]
    return "\n".join(lines)
