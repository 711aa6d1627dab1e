"""The verdict models: the one shape of every result (CLI --json, MCP structured output, orchestrator)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.pool.sandbox import SandboxInfo
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.kernel_program import KernelProgram
from maxkernel.tpu_tools.problem.sizes import CheckSize, ShapeContract, SizeCheck
from maxkernel.tpu_tools.problem.source import ReferenceInfo
from maxkernel.tpu_tools.problem.work_check import WorkCensus

FailureKind = Literal[
    "usage_error",  # the caller's mistake (missing file, unknown task) - not a verdict on the kernel
    "load_error",  # candidate broke on import / lacks workload
    "python_error",  # an exception in the candidate's own code while tracing or running
    "lowering_error",  # Pallas->Mosaic lowering rule (block shape not divisible by (8,128), unsupported primitive)
    "mosaic_error",  # the real Mosaic TPU compiler rejected the kernel
    "vmem_exhausted",
    "smem_exhausted",
    "compile_error",  # any other compiler failure
    "runtime_error",  # the compiled kernel failed while executing (out-of-bounds DMA, ...)
    "interpret_unsupported",  # jax's TPU interpreter itself failed: numbers not checkable off the chip
    "shape_mismatch",  # output shape/dtype differs from the reference's
    "shape_specialized",  # right (or compiles) at one size, fails at another: written for one shape only
    "output_mismatch",  # numbers differ beyond tolerance
    "race",  # TPU interpret mode's race detector fired
    "revisited_output_block",  # an output block written again after the grid left it: the earlier write is lost
    "out_of_bounds",  # a block index or an access (a DMA slice, a dynamic pl.ds) past its array or buffer
    "weak_check",  # a trivial output would pass too: the check cannot tell
    "case_unusable",  # the extra input case cannot be built or run by the reference itself - not the kernel
    "no_kernel",  # no pallas_call in the candidate (plain-JAX rewrites need allow_plain_jax)
    "work_outside_kernel",  # the pallas_calls do not carry the work: plain JAX computes the answer
    "host_callback",  # io_callback / pure_callback in the candidate: state carried between calls
    "reached_reference",  # the candidate opened, listed or imported the hidden reference / task sources
    "reference_error",  # the reference fails on its own (import, create_inputs, jit, run) - not the kernel
    "timeout",
    "crash",  # segfault or other fatal signal
    "oom",  # host memory cap exceeded
    "exited",  # candidate called sys.exit / os._exit
    "cancelled",
    "internal_error",  # a bug in maxkernel itself
    "tampered",  # the candidate changed the judge's code or clock, or its reported timings disagree with the parent's
    "implausible",  # a measured time beats the physical limit (roofline) of the device: never a win
]


class Failure(BaseModel):
    """Why a verdict is negative: one line for people and models, the full message for evidence."""

    kind: FailureKind
    summary: str = Field(description="one-line cause")
    message: str = Field(default="", description="full compiler/runtime message or traceback")
    stage: str | None = Field(default=None, description="trace|lower|compile|run|compare|load")
    line: int | None = Field(default=None, description="line in the candidate file, when known")
    requested_bytes: int | None = None
    capacity_bytes: int | None = None
    cause_kind: str | None = Field(
        default=None, description="shape_specialized: the failure kind at the size it failed at"
    )
    sizes_passed: list[str] = Field(default_factory=list, description="shape_specialized: where it worked")
    sizes_failed: list[str] = Field(default_factory=list, description="shape_specialized: where it failed")


class Phase(BaseModel):
    """One timed step of a verdict: where its seconds went (never evidence for the verdict itself)."""

    job: Literal["reference_side", "compile", "reference", "candidate", "compare"] = Field(
        description="reference_side: the reference-only child giving shapes and check sizes; compile: the "
        "candidate's compile child; reference: the reference child writing inputs and expected outputs at "
        "a size; candidate: the child running the candidate at a size; compare: this process's comparison"
    )
    step: str = Field(
        default="",
        description="'' for the whole job; else start (process start, imports, setup), load (the "
        "candidate's import), trace, lower, compile, interpret_compile, run, reference_run, oracle, "
        "ulp_nudge, calibration, or the child's own progress line",
    )
    size: str | None = Field(default=None, description="the size it ran at (small, derived, grown:M, ...)")
    seed: int | None = None
    call: int | None = Field(default=None, description="run: which call of the candidate's, from 1")
    seconds: float
    timed_by: Literal["parent", "child"] = Field(
        default="parent",
        description="parent: this process's clock, from the child's progress lines as they arrived; child: "
        "the compile child's own stage times",
    )


class SizesRecord(BaseModel):
    """What every verdict says about sizes: the target size (`size`), the check sizes, what ran where."""

    size: str = Field(default="", description="the target size: the shape the kernel is for")
    check_sizes: list[CheckSize] = Field(
        default_factory=list, description="the sizes validation interprets the kernel at (off the chip)"
    )
    checks: list[SizeCheck] = Field(default_factory=list, description="every check that ran, at its size")
    phases: list[Phase] = Field(
        default_factory=list,
        description="where the time went: every job with its seconds, and the steps inside it",
    )


class Environment(BaseModel):
    jax: str
    jaxlib: str
    libtpu: str | None
    platform: str = Field(description="backend the child process ran on, e.g. cpu or tpu")
    device_kind: str
    sandbox: SandboxInfo | None = Field(
        default=None, description="the OS sandbox the evaluation ran in (stamped by the parent, not the job)"
    )
    host: str | None = Field(
        default=None,
        description="the machine that judged it ($MAXKERNEL_HOST, else its hostname; stamped "
        "by the parent with the sandbox)",
    )


class StageTimes(BaseModel):
    trace_ms: float | None = None
    lower_ms: float | None = None
    compile_ms: float | None = None


class ArraySpec(BaseModel):
    shape: list[int]
    dtype: str


CompilerUsed = Literal[
    "mosaic-tpu", "mosaic-tpu-aot", "xla-cpu-interpret", "xla-local", "lowering-only", "none"
]


class CompileReport(SizesRecord):
    """Did the candidate compile for the target, with what, and what did it compile?"""

    kind: Literal["compile"] = "compile"
    ok: bool
    target: str
    size_note: str = Field(
        default="", description="where the size came from (asked, or the reference's default)"
    )
    kernel_path: str
    kernel_sha256: str | None = None
    reference: ReferenceInfo | None = None
    compiler: CompilerUsed = "none"
    compiler_note: str = ""
    devices: int = Field(default=1, description="devices compiled for (the reference's MESH; 1 without one)")
    topology: str | None = Field(
        default=None, description="the libtpu topology a multi-chip kernel was compiled for, e.g. v5p:2x2x1"
    )
    times: StageTimes = StageTimes()
    output: list[ArraySpec] = []
    expected_output: list[ArraySpec] = []
    num_pallas_calls: int = 0
    pallas_calls: list[dict[str, Any]] = Field(
        default_factory=list, description="grid, blocks, scratch per call"
    )
    program: KernelProgram | None = Field(
        default=None, description="what each pallas_call's body runs at this size (problem/kernel_program.py)"
    )
    memory: dict[str, int] = Field(default_factory=dict, description="compiled memory stats, bytes")
    cost_analysis: dict[str, float] = Field(default_factory=dict)
    failure: Failure | None = None
    warnings: list[str] = []
    environment: Environment | None = None
    wall_time_s: float | None = None


class LeafError(BaseModel):
    """One output leaf of one run: the errors the rule compared and which rule decided."""

    leaf: int
    ok: bool
    rule: Literal["elementwise", "error_ratio", "exact", "no_oracle"] = Field(
        description="what decided: the elementwise tolerance vs the target-precision reference, the error "
        "ratio against the oracle, exact equality (integers), or the tolerance alone (no oracle)"
    )
    elementwise_ok: bool
    kernel_max_err: float | None = None
    kernel_mean_err: float | None = None
    reference_max_err: float | None = None
    reference_mean_err: float | None = None
    ratio_max: float | None = Field(default=None, description="kernel max error / reference max error")
    ratio_mean: float | None = None
    kernel_bias: float | None = Field(default=None, description="|mean signed error| against the oracle")
    reference_bias: float | None = None
    bias_allowed: float | None = None
    factor: float = 2.0
    floor_max: float | None = None
    floor_mean: float | None = None
    worst_index: list[int] | None = None
    worst_oracle: float | None = None
    worst_kernel: float | None = None
    worst_reference: float | None = None
    finding: str = Field(default="", description="the sentence the verdict quotes, built from the numbers")


class Numerics(BaseModel):
    """What the kernel was compared with: the reference as the target computes it, and the upcast oracle."""

    target: str = Field(description="how the reference's answer the kernel is compared with was computed")
    oracle: str | None = Field(default=None, description="how the oracle was computed")
    oracle_missing: str | None = Field(
        default=None, description="why there is no oracle (the tolerance alone decides)"
    )
    differs_from_host: list[str] = Field(
        default_factory=list,
        description="the dots/convolutions the target computes differently from the host",
    )
    host_max_err: list[float] = Field(
        default_factory=list,
        description="per output leaf (first seed): the plain host run's max error against the oracle, kept where "
        "the target's numerics differ from the host's",
    )
    reference_max_err: list[float] = Field(
        default_factory=list, description="per output leaf (first seed): the target-precision reference's"
    )
    factor: float = Field(default=2.0, description="the error rule's factor")
    rule: str = Field(default="", description="the rule, in words")


class Tolerance(BaseModel):
    atol: float
    rtol: float
    source: str = Field(description="'reference CONFIG', 'caller', or 'default for <dtype>'")


class SeedResult(BaseModel):
    seed: int
    ok: bool
    inputs: str = Field(
        default="reference",
        description="the input regime this seed ran (problem/input_regimes.py): 'reference' (the reference's "
        "own draw), 'channel_scales' or 'heavy_tails'",
    )
    inputs_note: str | None = Field(
        default=None, description="why the seed ran another regime than its place asked (a fallback)"
    )
    tolerance: Tolerance | None = Field(
        default=None,
        description="this seed's own tolerance where it differs from the report's: its regime's inputs are "
        "ill-conditioned for the output dtype (the reference itself moves over the atol under a one-ulp nudge)",
    )
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch_fraction: float | None = None
    worst_index: list[int] | None = None
    worst_expected: float | None = None
    worst_actual: float | None = None
    nan_count: int = 0
    inf_count: int = 0
    reference_nan_count: int = 0
    trivial_outputs_passing: list[str] = Field(
        default_factory=list, description="zeros / mean / input copies that would also pass"
    )
    mismatch_tails: list[int] | None = Field(
        default=None,
        description="the first wrong output is wrong exactly where some index_i >= tails[i] (trailing slabs, "
        "a dropped remainder); None where the wrong part is not such slabs",
    )
    mismatch_shape: list[int] | None = Field(default=None, description="that output's shape")
    mismatch_leaf: int | None = Field(default=None, description="that output's place, when there are several")
    mismatch_unwritten: bool = Field(
        default=False, description="every wrong element is NaN: never written (interpret mode fills with NaN)"
    )
    errors: list[LeafError] = Field(
        default_factory=list,
        description="per output leaf: the errors against the oracle and the rule that decided",
    )


class ValidationReport(SizesRecord):
    """Does the candidate compute the reference's answer, on fresh inputs, with evidence?

    It compiles at the target size (`size`) first, then runs at every check size; `checks` says what
    ran where, and `per_seed` is from the last size that ran.
    """

    kind: Literal["validation"] = "validation"
    ok: bool
    target: str
    execution: str = Field(
        default="", description="how the candidate ran, e.g. 'TPU interpret mode on CPU (race detection on)'"
    )
    kernel_path: str
    kernel_sha256: str | None = None
    reference: ReferenceInfo | None = None
    devices: int = Field(
        default=1, description="devices the candidate ran on (the reference's MESH; 1 without one)"
    )
    seeds: list[int] = []
    seed_offset: int | None = Field(
        default=None, description="first seed (drawn at random unless given): pass it back to reproduce"
    )
    size_note: str = Field(
        default="", description="where the size came from (asked, or the reference's default)"
    )
    run_order: list[int] = Field(
        default_factory=list,
        description="the seeds in the order the candidate ran them (each more than once)",
    )
    case: InputCase | None = Field(default=None, description="the extra input case validated, if any")
    tolerance: Tolerance | None = None
    numerics: Numerics | None = Field(
        default=None,
        description="what the kernel was compared with: the target-precision reference and the oracle",
    )
    per_seed: list[SeedResult] = []
    error_summary: str = Field(
        default="", description="the error rule's worst ratios over every run, in one line (error_rule.py)"
    )
    has_pallas_call: bool | None = None
    work: WorkCensus | None = Field(default=None, description="flops inside/outside the pallas_calls (jaxpr)")
    races_found: bool = False
    weak_check: bool = False
    program: KernelProgram | None = Field(
        default=None, description="what each pallas_call's body ran at the last size that ran"
    )
    target_program: str = Field(
        default="",
        description="how the kernel program traced at the target compares with the ones validated (one line)",
    )
    shape_contract: ShapeContract | None = Field(
        default=None,
        description="what the kernel does off the alignment small and the target share: a finding, not a "
        "failure (unless strict_shapes)",
    )
    failure: Failure | None = None
    warnings: list[str] = []
    environment: Environment | None = None
    wall_time_s: float | None = None


class ReferenceSide(BaseModel):
    """What the reference child hands the parent (no arrays: those are files)."""

    ok: bool
    failure: Failure | None = None
    reference: ReferenceInfo | None = None
    size: str = ""
    size_note: str = ""
    size_dims: dict[str, Any] = Field(default_factory=dict, description="the size's dimensions")
    check_sizes: list[CheckSize] = Field(default_factory=list, description="resolved when asked")
    check_notes: list[str] = Field(default_factory=list, description="why a default check size is missing")
    absent_inputs: list[int] = Field(
        default_factory=list,
        description="positions the reference's create_inputs fills with None (an optional argument left out): "
        "not handed over, and put back as None in every call of the candidate's workload",
    )
    input_specs: list[ArraySpec] = []
    output_specs: list[ArraySpec] = []
    census: WorkCensus | None = None
    tolerance: Tolerance | None = None
    cannot_tell: str | None = Field(default=None, description="why no tolerance can tell a constant apart")
    numerics: Numerics | None = Field(default=None, description="the target's numerics and the oracle")
    flops: float | None = Field(
        default=None, description="the flops one chip does at this size (get_flops, or its share over a MESH)"
    )
    input_values: dict[int, Any] = Field(
        default_factory=dict,
        description="the values of its small integer inputs at this size (group sizes, page tables, lengths) "
        "by input position, from create_inputs: the estimate costs data-dependent work from them",
    )
    input_values_note: str = Field(default="", description="why there are none, when asked for")
    input_regimes: dict[int, str] = Field(
        default_factory=dict, description="the input regime each seed ran, by seed (problem/input_regimes.py)"
    )
    input_regime_notes: dict[int, str] = Field(
        default_factory=dict, description="by seed: why it fell back to the reference's own draw"
    )
    seed_tolerances: dict[int, Tolerance] = Field(
        default_factory=dict,
        description="by seed: a regime seed's widened tolerance, where its inputs move the reference itself over "
        "the atol under a one-ulp nudge",
    )
