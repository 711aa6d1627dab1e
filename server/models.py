"""What the server's tools take and return beyond the core's reports: argument types and bundles.

Argument aliases carry the `Field(description=...)` a model reads in each tool's input schema.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cli.args import CHECK_SIZES_DEFAULT_TEXT, SIZE_DEFAULT_TEXT
from maxkernel.tpu_tools.problem.tasks import TaskSummary
from maxkernel.tpu_tools.profile.run import ProfileReport  # imports jax (no backend started): ~0.6 s
from maxkernel.tpu_tools.profile.trace_summary import TraceSummary
from maxkernel.tpu_tools.reports import CompileReport, ValidationReport


class EvaluationReport(BaseModel):
    """compile -> validate -> profile of one kernel, stopping at the first negative verdict."""

    kind: Literal["evaluation"] = "evaluation"
    ok: bool = Field(description="every stage that ran passed")
    stopped_at: Literal["compile", "validate", "profile"] | None = Field(
        default=None, description="the stage whose verdict was negative; None if all passed"
    )
    kernel_path: str = Field(description="the exact file that was evaluated")
    kernel_sha256: str
    compile: CompileReport
    validation: ValidationReport | None = None
    profile: ProfileReport | None = None
    notes: list[str] = []


class TaskDetail(BaseModel):
    """A JaxBench task: its summary, and the reference source a candidate must match."""

    summary: TaskSummary
    reference_path: str
    reference_source: str
    pallas_reference_source: str | None = Field(
        default=None, description="the task's own expert Pallas kernel, when it ships one"
    )


class SavedTraceSummary(TraceSummary):
    """A trace summary, also saved in the workspace (readable as maxkernel://artifacts/{sha})."""

    artifact_sha256: str
    artifact_uri: str


# Arguments

KernelSource = Annotated[
    str | None,
    Field(
        description="the candidate module's full Python text (saved as kernels/<sha256>.py in the workspace)"
    ),
]
KernelPath = Annotated[
    str | None,
    Field(description="path of the candidate module inside the workspace (relative to it, or absolute)"),
]
Reference = Annotated[
    str,
    Field(
        description="the problem to match: a JaxBench task id ('8p_GEMM', '8p') or a reference module path "
        "inside the workspace"
    ),
]
Size = Annotated[Literal["small", "full"], Field(description="input sizes from the reference's SIZES")]
DefaultSize = Annotated[
    str | None,
    Field(
        description="the target size, a name from the reference's SIZES: the shape the kernel is for "
        f"(compile, estimate, tune, profile and scores use it); omit for {SIZE_DEFAULT_TEXT}"
    ),
]
CheckSizes = Annotated[
    list[str] | None,
    Field(
        description="the check sizes validation runs the kernel at (interpret mode off the chip): SIZES "
        f"names or 'derived'; omit for {CHECK_SIZES_DEFAULT_TEXT}"
    ),
]
SeedOffset = Annotated[
    int | None,
    Field(
        ge=0,
        description="first seed; omit to draw one at random (the verdict records it: pass it back to reproduce)",
    ),
]
Timeout = Annotated[float, Field(gt=0, le=3600, description="wall-clock limit per child process, seconds")]
CompileTarget = Annotated[
    str,
    Field(
        description="'tpu-v4'|'tpu-v5e'|'tpu-v5p'|'tpu-v6e'|'tpu-7x' (real Mosaic compiler), 'cpu', 'local'"
    ),
]
RunTarget = Annotated[
    str,
    Field(description="where to run: 'cpu' (TPU interpret mode, race detection), a tpu-* chip, or 'local'"),
]
Seeds = Annotated[int, Field(ge=1, le=16, description="number of fresh input seeds to compare on")]
Tol = Annotated[float | None, Field(ge=0, description="override the reference's tolerance")]


Reps = Annotated[int, Field(ge=1, le=1000, description="timed calls per program (interleaved)")]
MeasureInterpret = Annotated[
    bool,
    Field(
        description="also time a Pallas kernel in TPU interpret mode when its chip is absent (labeled, no speedup)"
    ),
]
