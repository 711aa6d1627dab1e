"""The Auto loop's journal: its configuration, per-iteration state, scores and the best kernel so far.

Everything here is pydantic so `state.json` round-trips exactly; `resume` rebuilds the loop from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.clients.models import Budget
from maxkernel.tpu_tools.profile.scoreboard import VsXla

STATE_VERSION = 1
DESIGN_CHIP = "tpu-v6e"  # chip facts for prompts when the target is cpu/local
Step = Literal[
    "plan", "implement", "compile", "debug", "validate", "test", "profile", "analyze", "autotune", "done"
]
Basis = Literal["measured", "estimate", "none"]


FRESH_SEED_BASE = 10_000


class StepFailed(Exception):
    """A model step produced nothing usable (its reply failed to parse twice)."""


class AutoConfig(BaseModel):
    task: str = Field(description="label for the run: the task id or the reference file's name")
    reference: str = Field(description="what the server's tools get: a JaxBench id or a workspace path")
    task_spec: str = Field(default="", description="prompt text for the task; fetched with get_task if empty")
    target: str = "tpu-v6e"
    size: str | None = Field(
        default=None,
        description="the target size; None: the reference's production size (full, else the largest)",
    )
    iterations: int = Field(default=5, ge=1)
    max_debug: int = Field(default=3, ge=0)
    seeds: int = Field(default=3, ge=1, le=16)
    check_sizes: list[str] | None = Field(
        default=None, description="where validation runs the kernel; None: the server's default check sizes"
    )
    model: str = "offline"
    budget: Budget = Budget()
    profile: bool = True
    test_cases: int = Field(
        default=3, ge=0, le=16, description="tester cases validated after the standard validation (0: none)"
    )
    autotune: bool = Field(default=False, description="sweep the verified kernel's tunables after analyze")
    autotune_max_configs: int = Field(default=4, ge=1, le=64, description="configs the sweep compiles")


class Score(BaseModel):
    """How a verified kernel ranks: measured on the target chip, else the static estimate, else unranked."""

    basis: Basis
    time_us: float | None = None
    label: str

    def key(self) -> tuple[int, float]:
        rank = {"measured": 0, "estimate": 1, "none": 2}[self.basis]
        return rank, self.time_us if self.time_us is not None else float("inf")


class Attempt(BaseModel):
    n: int
    origin: Literal["implementer", "debugger", "autotuner"]
    outcome: Literal[
        "verified",
        "compile_failed",
        "validation_failed",
        "test_failed",
        "tool_error",
        "duplicate_rejected",
        "pending",
    ]
    error: str | None = None


class IterationState(BaseModel):
    index: int
    plan: dict | None = None
    source: str | None = None
    pending_fix: dict | None = None
    attempts: list[Attempt] = []
    failed_fixes: list[dict] = []
    failed_sources: list[str] = []
    debug_used: int = 0
    last_error: str | None = None
    compile: dict | None = None
    validation: dict | None = None
    profile: dict | None = None
    trace_summary: dict | None = None
    analysis: dict | None = None
    verified: bool = False
    score: Score | None = None
    outcome: str | None = None
    tests: list[dict] = Field(default_factory=list, description="per attempt: each extra case's verdict")
    autotune: dict | None = None
    autotune_done: bool = False
    pre_autotune: dict | None = Field(default=None, description="the verified kernel the sweep tries to beat")


class Best(BaseModel):
    iteration: int
    origin: str = Field(default="implementer", description="the role whose source it is")
    source: str
    kernel_sha256: str | None
    score: Score
    target_size: str | None = Field(default=None, description="the size it was compiled and scored at")
    validated_at: list[str] = Field(default_factory=list, description="the check sizes its validation passed")
    numerics: str = Field(default="", description="its validation's error rule line (error_summary)")
    parts: str = Field(
        default="", description="which parts are kernels and which XLA runs (its validation's work census)"
    )
    vs_xla: VsXla | None = Field(
        default=None,
        description="its time beside XLA's for the same reference (its profile), with their tiers",
    )


class RunState(BaseModel):
    version: int = STATE_VERSION
    config: AutoConfig
    chip: dict = {}
    next_step: Step = "plan"
    iteration: int = 1
    current: IterationState = IterationState(index=1)
    finished: list[IterationState] = []
    feedback: str | None = None
    best: Best | None = None
    steps: list[str] = Field(default_factory=list, description="finished steps, '<iter>:<step>', in order")
    stop_reason: str | None = None
    elapsed_s: float = 0.0
    profile_server: int | None = None
    test_cases: list[dict] | None = Field(default=None, description="the tester's cases, asked once per task")
    test_cases_for: str | None = Field(default=None, description="the task the cached cases were asked for")


def _error_text(report: dict | None, fallback: str = "") -> str:
    failure = (report or {}).get("failure") or {}
    parts = [failure.get("summary", ""), failure.get("message", "")]
    text = "\n".join(p for p in parts if p).strip()
    return text or fallback or "failed without a message"


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def score_profile(profile: dict | None) -> Score:
    """Measured time when the candidate ran natively on the target; else the labeled estimate."""
    if not profile:
        return Score(basis="none", label="not profiled")
    measured = (profile.get("measured") or {}).get("candidate")
    if profile.get("candidate_measured") and profile.get("candidate_execution") == "native" and measured:
        us = float(measured["median_ms"]) * 1000.0
        return Score(
            basis="measured", time_us=us, label=f"measured {us:.2f} us on {profile.get('measured_on')}"
        )
    est = profile.get("static_estimate")
    if est and est.get("estimated_time_us") is not None:
        us = float(est["estimated_time_us"])
        return Score(
            basis="estimate", time_us=us, label=f"estimate {us:.2f} us for {est.get('chip')} (not measured)"
        )
    reason = profile.get("candidate_not_measured_reason") or "no measurement and no estimate for this target"
    return Score(basis="none", label=reason)
