"""Typed outputs of the subagent roles: what a model's reply must parse into.

The orchestrator's loops and the MCP server read these models, never raw text. Fields are lenient
about extra keys (models add commentary) and strict about the ones a loop acts on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Bound = Literal["compute", "memory", "overhead"]
Semantics = Literal["parallel", "arbitrary"]
ErrorClass = Literal[
    "block_shape",
    "vmem_oom",
    "unsupported_primitive",
    "lowering",
    "dtype",
    "shape_mismatch",
    "wrong_result",
    "nan_or_inf",
    "out_of_bounds",
    "timeout",
    "crash",
    "python_error",
    "other",
]
Distribution = Literal[
    "normal",
    "uniform",
    "zeros",
    "ones",
    "constant",
    "large_magnitude",
    "small_magnitude",
    "negative",
    "mixed_sign",
    "sparse",
    "integers",
]

# Fields whose value is Python source: the parser fills them from the reply's last ```python block,
# because models escape code inside JSON strings badly.
SOURCE_FIELD_KEY = "source_field"


class _Output(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Plan(_Output):
    """The planner's strategy for one kernel on one chip."""

    strategy: str = Field(description="one paragraph: tiling, what stays in VMEM, the loop structure")
    block_sizes: dict[str, int] = Field(description="block size per named dimension, e.g. {'block_m': 256}")
    grid_order: list[str] = Field(description="grid axes outermost first, e.g. ['m', 'n', 'k']")
    dimension_semantics: list[Semantics] = Field(description="one per grid axis; reductions are 'arbitrary'")
    accumulator_dtype: str = Field(default="float32", description="dtype of the VMEM accumulator, if any")
    expected_bound: Bound = Field(description="what limits the kernel at these sizes on this chip")
    vmem_bytes_estimate: int | None = Field(
        default=None, description="VMEM the plan needs, double buffers and scratch included"
    )
    risks: list[str] = Field(default_factory=list, description="what could fail to compile or be slow")
    rationale: str = Field(description="why these choices, with the roofline arithmetic")

    @field_validator("block_sizes")
    @classmethod
    def _positive_blocks(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: n for k, n in v.items() if n <= 0}
        if bad:
            raise ValueError(f"block sizes must be positive, got {bad}")
        return v


class KernelProposal(_Output):
    """The implementer's candidate: a complete module exposing `workload(*inputs)`."""

    source: str = Field(
        description="complete Python module defining workload(*inputs)",
        json_schema_extra={SOURCE_FIELD_KEY: True},
    )
    notes: str = Field(default="", description="what the kernel does differently from the plan, if anything")

    @field_validator("source")
    @classmethod
    def _defines_workload(cls, v: str) -> str:
        if "def workload" not in v and "workload =" not in v:
            raise ValueError("source must define workload(*inputs)")
        return v


class Diagnosis(_Output):
    """The debugger's reading of a failure and its fix."""

    cause: str = Field(description="the root cause, naming the line or construct")
    error_class: ErrorClass = Field(description="the kind of failure")
    fix_summary: str = Field(description="what the fix changes, in one or two sentences")
    fixed_source: str = Field(
        description="the complete corrected module", json_schema_extra={SOURCE_FIELD_KEY: True}
    )


class TestCase(_Output):
    """One extra input case the candidate and the reference must agree on."""

    __test__ = False  # not a pytest class

    name: str = Field(description="short identifier, e.g. 'ragged_k'")
    sizes: dict[str, int | str] = Field(
        default_factory=dict, description="overrides of the task's size dict (may include 'dtype')"
    )
    distribution: Distribution = Field(default="normal", description="how input values are drawn")
    scale: float | None = Field(default=None, description="magnitude for the distribution, if it takes one")
    why: str = Field(default="", description="the bug this case would catch")


class TestCases(_Output):
    """The tester's extra cases."""

    __test__ = False

    cases: list[TestCase] = Field(min_length=1)

    @field_validator("cases")
    @classmethod
    def _unique_names(cls, v: list[TestCase]) -> list[TestCase]:
        names = [c.name for c in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"test case names must be unique, repeated: {dup}")
        return v


class ProfileAnalysis(_Output):
    """The profile analyst's verdict on where the time goes."""

    bottleneck: Literal["compute", "memory", "overhead", "unknown"]
    evidence: list[str] = Field(description="numbers from the report that support the verdict")
    next_move: str = Field(description="the single change most likely to help")


class TuningSpace(_Output):
    """The autotuner's search space for one kernel."""

    tunables: dict[str, list[int | str | bool]] = Field(description="name -> candidate values")
    constraints: list[str] = Field(
        default_factory=list, description="conditions a config must meet, as text, e.g. 'K % block_k == 0'"
    )
    objective: str = Field(default="median_ms", description="what to minimise")

    @field_validator("tunables")
    @classmethod
    def _nonempty(cls, v: dict[str, list]) -> dict[str, list]:
        if not v:
            raise ValueError("tunables must name at least one parameter")
        empty = [k for k, vals in v.items() if not vals]
        if empty:
            raise ValueError(f"tunables with no candidate values: {empty}")
        return v

    @property
    def size(self) -> int:
        """Configs in the full cross product, before constraints."""
        n = 1
        for vals in self.tunables.values():
            n *= len(vals)
        return n


def source_fields(model: type[BaseModel]) -> list[str]:
    """Names of the fields of `model` that hold Python source."""
    out = []
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra
        if isinstance(extra, dict) and extra.get(SOURCE_FIELD_KEY):
            out.append(name)
    return out
