"""The MCP tools: typed arguments in, the evaluation core's report models out.

A negative verdict (does not compile, wrong numbers, hangs past its timeout) is a normal result with
`ok=false`. `ToolError` is kept for the caller's mistakes and for kernels that took their process down.
Plumbing (argument resolution, progress, cancellation) lives in `requests.py`.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from maxkernel.server.models import (
    CheckSizes,
    CompileTarget,
    DefaultSize,
    EvaluationReport,
    KernelPath,
    KernelSource,
    MeasureInterpret,
    Reference,
    Reps,
    RunTarget,
    SavedTraceSummary,
    SeedOffset,
    Seeds,
    TaskDetail,
    Timeout,
    Tol,
)
from maxkernel.server.requests import (
    AppState,
    CancellableEvaluator,
    Progress,
    ProgressFn,
    check_target,
    finish,
    mcp_hint,
    resolve_call,
    resolve_kernel,
    resolve_reference,
    run_blocking,
    run_refusable,
    state_of,
)
from maxkernel.server.workspace import WorkspaceError, sha256_text
from maxkernel.tpu_tools.cli.args import (  # the CLI's defaults: one grammar on the shell and over MCP
    DEFAULT_CHECK_SIZES,
    DEFAULT_REPS,
    DEFAULT_SEED_OFFSET,
    DEFAULT_SEEDS,
    DEFAULT_SIZE,
    DEFAULT_STRICT_SHAPES,
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT_S,
    PROFILE_TIMEOUT_S,
    STRICT_SHAPES_HELP,
    size_kwargs,
)
from maxkernel.tpu_tools.cost.analyze import AnalysisReport
from maxkernel.tpu_tools.cost.autotune import AutotuneReport
from maxkernel.tpu_tools.cost.estimate import EstimateReport
from maxkernel.tpu_tools.hardware.chips import CHIPS, ChipSpec
from maxkernel.tpu_tools.model.compose import COMPOSE_CHECK_SIZES_TEXT, ComposeReport
from maxkernel.tpu_tools.model.extract import ExtractReport
from maxkernel.tpu_tools.model.hotspots import HotspotReport
from maxkernel.tpu_tools.port.report import PortReport
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.program import ProgramDescription
from maxkernel.tpu_tools.problem.tasks import TaskSummary
from maxkernel.tpu_tools.profile.run import ProfileReport  # imports jax (no backend started): ~0.6 s
from maxkernel.tpu_tools.profile.trace_summary import TraceFormatError
from maxkernel.tpu_tools.reports import CompileReport, ValidationReport

# ---------------------------------------------------------------------------------- the tools

EVALUATES = ToolAnnotations(  # writes only content-addressed files: same input, same file
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(  # writes one new workspace file, never overwrites one
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


async def compile_kernel(
    ctx: Context[AppState],
    reference: Reference,
    kernel_source: KernelSource = None,
    kernel_path: KernelPath = None,
    target: CompileTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> CompileReport:
    """Compile a Pallas kernel for a TPU generation with the real Mosaic compiler (no TPU needed).

    Returns the compiler's verdict: ok, grid/blocks per pallas_call, memory, or the classified failure
    with the line in the kernel. kernel_path in the report is the exact file compiled.
    """
    st, ref, tgt, kernel = resolve_call(ctx, reference, kernel_source, kernel_path, target)
    report = await run_blocking(
        ctx,
        lambda progress, cancel: st.evaluator.compile(
            str(kernel),
            ref,
            tgt,
            **size_kwargs(size),
            timeout_s=timeout_s,
            on_progress=progress,
            cancel=cancel,
        ),
    )
    return finish(report, "compile_kernel")


async def validate_kernel(
    ctx: Context[AppState],
    reference: Reference,
    kernel_source: KernelSource = None,
    kernel_path: KernelPath = None,
    target: RunTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    check_sizes: CheckSizes = DEFAULT_CHECK_SIZES,
    seeds: Seeds = DEFAULT_SEEDS,
    seed_offset: SeedOffset = DEFAULT_SEED_OFFSET,
    atol: Tol = None,
    rtol: Tol = None,
    allow_plain_jax: Annotated[bool, Field(description="accept a candidate with no pallas_call")] = False,
    allow_weak_check: Annotated[
        bool, Field(description="accept a check that trivial outputs (zeros, mean) would also pass")
    ] = False,
    case: Annotated[
        InputCase | None,
        Field(
            description="an extra input case: size overrides merged over the first check size "
            "(maxkernel-format references only) and a distribution for the float inputs; omit for the "
            "reference's own inputs"
        ),
    ] = None,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
    strict_shapes: Annotated[bool, Field(description=STRICT_SHAPES_HELP)] = DEFAULT_STRICT_SHAPES,
) -> ValidationReport:
    """Compile the kernel for the target at the target size (the real compiler), then run it and the
    reference on fresh inputs at every check size and compare (on CPU: TPU interpret mode, races).

    Returns per-seed errors, the tolerance used and where it came from, what ran at which size (`checks`),
    or the classified failure; a kernel right at one size and wrong at another is `shape_specialized`.
    With the default check sizes, `shape_contract` says what a passing kernel does off the alignment small
    and the target share (raises, leaves a remainder unwritten, or is right): a finding, a check with
    `strict_shapes`. With `case`, a case the reference itself cannot build or run fails as `case_unusable`.
    """
    st, ref, tgt, kernel = resolve_call(ctx, reference, kernel_source, kernel_path, target)
    report = await run_blocking(
        ctx,
        lambda progress, cancel: st.evaluator.validate(
            str(kernel),
            ref,
            tgt,
            size,
            check_sizes=check_sizes,
            seeds=seeds,
            seed_offset=seed_offset,
            atol=atol,
            rtol=rtol,
            allow_plain_jax=allow_plain_jax,
            allow_weak_check=allow_weak_check,
            case=case,
            timeout_s=timeout_s,
            on_progress=progress,
            cancel=cancel,
            caller="mcp",
            strict_shapes=strict_shapes,
        ),
    )
    return finish(report, "validate_kernel")


def _profile_call(
    st: AppState,
    kernel: Path,
    ref: str,
    target: str,
    size: str | None,
    timeout_s: float,
    reps: int,
    interp: bool,
) -> Callable[[ProgressFn, threading.Event], ProfileReport]:
    # The trace lands in the workspace, so summarize_trace (and the host) can read it afterwards.
    sha = sha256_text(kernel.read_text(encoding="utf-8"))
    trace_dir = (
        st.workspace.root
        / "traces"
        / f"{sha[:16]}-{target}-{size or 'default'}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    return lambda progress, cancel: st.evaluator.profile(
        str(kernel),
        ref,
        target,
        **size_kwargs(size),
        trace_dir=str(trace_dir),
        measure_interpret=interp,
        reps=reps,
        timeout_s=timeout_s,
        on_progress=progress,
        cancel=cancel,
    )


async def profile_kernel(
    ctx: Context[AppState],
    reference: Reference,
    kernel_source: KernelSource = None,
    kernel_path: KernelPath = None,
    target: RunTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    reps: Reps = DEFAULT_REPS,
    measure_interpret: MeasureInterpret = False,
    timeout_s: Timeout = PROFILE_TIMEOUT_S,
) -> ProfileReport:
    """Time the kernel against the reference (interleaved, with a noise floor), trace it, estimate it.

    A speedup appears only when both ran natively on the same device. Without the chip a Pallas kernel
    gets a labeled static estimate for the target instead; interpret-mode times are never speedups.
    The trace is kept under the workspace's traces/ (trace_path in the report).
    """
    st, ref, tgt, kernel = resolve_call(ctx, reference, kernel_source, kernel_path, target)
    call = _profile_call(st, kernel, ref, tgt, size, timeout_s, reps, measure_interpret)
    return finish(await run_blocking(ctx, call), "profile_kernel")


async def evaluate_kernel(
    ctx: Context[AppState],
    reference: Reference,
    kernel_source: KernelSource = None,
    kernel_path: KernelPath = None,
    compile_target: CompileTarget = DEFAULT_TARGET,
    validate_target: RunTarget = DEFAULT_TARGET,
    profile_target: RunTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    check_sizes: CheckSizes = DEFAULT_CHECK_SIZES,
    seeds: Seeds = DEFAULT_SEEDS,
    seed_offset: SeedOffset = DEFAULT_SEED_OFFSET,
    profile: Annotated[bool, Field(description="run the profile stage after a passing validation")] = True,
    reps: Reps = DEFAULT_REPS,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> EvaluationReport:
    """Compile, then validate, then profile one kernel, stopping at the first negative verdict."""
    st = state_of(ctx)
    ref = resolve_reference(st.workspace, reference)
    ctgt, vtgt, ptgt = (
        check_target(compile_target),
        check_target(validate_target),
        check_target(profile_target),
    )
    kernel = resolve_kernel(st.workspace, kernel_source, kernel_path)
    sha = sha256_text(kernel.read_text(encoding="utf-8"))
    prog = Progress(ctx)
    compiled = await run_blocking(
        ctx,
        lambda progress, cancel: st.evaluator.compile(
            str(kernel),
            ref,
            ctgt,
            **size_kwargs(size),
            timeout_s=timeout_s,
            on_progress=progress,
            cancel=cancel,
        ),
        prefix="compile: ",
        progress=prog,
    )
    out = EvaluationReport(
        ok=False, kernel_path=str(kernel), kernel_sha256=sha, compile=finish(compiled, "evaluate_kernel")
    )
    if not compiled.ok:
        out.stopped_at = "compile"
        return out
    validated = await run_blocking(
        ctx,
        lambda progress, cancel: st.evaluator.validate(
            str(kernel),
            ref,
            vtgt,
            size,
            check_sizes=check_sizes,
            seeds=seeds,
            seed_offset=seed_offset,
            timeout_s=timeout_s,
            on_progress=progress,
            cancel=cancel,
        ),
        prefix="validate: ",
        progress=prog,
    )
    out.validation = finish(validated, "evaluate_kernel")
    if not validated.ok:
        out.stopped_at = "validate"
        return out
    if not profile:
        out.ok = True
        out.notes.append("profile skipped (profile=false)")
        return out
    call = _profile_call(st, kernel, ref, ptgt, size, timeout_s, reps, False)
    out.profile = finish(await run_blocking(ctx, call, prefix="profile: ", progress=prog), "evaluate_kernel")
    out.ok = out.profile.ok
    out.stopped_at = None if out.ok else "profile"
    return out


async def summarize_trace(
    ctx: Context[AppState],
    trace_path: Annotated[
        str,
        Field(
            description="a profiler logdir or trace file (.trace.json.gz, .json, .xplane.pb) in the workspace"
        ),
    ],
    top: Annotated[int, Field(ge=1, le=200, description="how many ops to list, by self time")] = 15,
) -> SavedTraceSummary:
    """Summarize a jax.profiler trace: top ops by self time, categories, busy fraction, idle gaps."""
    from maxkernel.tpu_tools.judge.evaluate import summarize_trace as summarize

    st = state_of(ctx)
    try:
        path = st.workspace.resolve(trace_path, kind="trace")
        summary = await anyio.to_thread.run_sync(lambda: summarize(path, top))
    except (WorkspaceError, TraceFormatError) as e:
        raise ToolError(str(e)) from None
    sha, _ = st.workspace.save_artifact(summary.model_dump_json(indent=2))
    return SavedTraceSummary(
        **summary.model_dump(), artifact_sha256=sha, artifact_uri=f"maxkernel://artifacts/{sha}"
    )


async def estimate_kernel(
    ctx: Context[AppState],
    reference: Reference,
    kernel_source: KernelSource = None,
    kernel_path: KernelPath = None,
    target: CompileTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> EstimateReport:
    """Static TPU performance estimate of a Pallas kernel (compile-only, no chip): time, bound, VMEM fit.

    Always an estimate, never a measurement, labeled with its tier: `llo` (compute from the TPU
    compiler's own schedule) or `model` (pipeline model of the grid and BlockSpecs). Work outside
    the pallas_calls is costed too, op by op as the XLA baseline's is; the tier is `llo` only when the
    kernels and every op beside them are. An under-declared pl.CostEstimate is ignored and named.
    """
    st, ref, tgt, kernel = resolve_call(ctx, reference, kernel_source, kernel_path, target)
    result = await run_blocking(
        ctx,
        lambda progress, cancel: st.evaluator.estimate(
            str(kernel),
            ref,
            tgt,
            **size_kwargs(size),
            timeout_s=timeout_s,
            on_progress=progress,
            cancel=cancel,
        ),
    )
    return finish(result, "estimate_kernel")


async def analyze_kernel(
    ctx: Context[AppState],
    reference: Reference,
    kernel_source: KernelSource = None,
    kernel_path: KernelPath = None,
    target: CompileTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> AnalysisReport:
    """What the TPU compiler made of a kernel (compile-only, from libtpu's LLO dump).

    Per pallas_call and per XLA program: bundles per grid step, unit utilization of the loop (MXU,
    VALU, XLU, EUP, vector loads/stores), spills, VMEM allocated vs scoped limit and physical, DMAs
    per step; `summary` is a short text to act on; `estimate` is the labeled static estimate.
    """
    st, ref, tgt, kernel = resolve_call(ctx, reference, kernel_source, kernel_path, target)
    result = await run_blocking(
        ctx,
        lambda progress, cancel: st.evaluator.analyze(
            str(kernel),
            ref,
            tgt,
            **size_kwargs(size),
            timeout_s=timeout_s,
            on_progress=progress,
            cancel=cancel,
        ),
    )
    return finish(result, "analyze_kernel")


async def autotune_kernel(
    ctx: Context[AppState],
    template_source: Annotated[
        str, Field(description="kernel module text with ${name} placeholders for each tunable")
    ],
    space: Annotated[
        dict[str, list[int | str | float]],
        Field(
            description="tunable name -> candidate values, e.g. {'block_m': [128, 256], 'block_k': [256, 512]}"
        ),
    ],
    reference: Reference,
    target: CompileTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    check_sizes: CheckSizes = DEFAULT_CHECK_SIZES,
    max_configs: Annotated[
        int, Field(ge=1, le=64, description="configs compiled + validated after pruning")
    ] = 4,
    objective: Annotated[
        str, Field(description="'estimate' (static model) or 'measured' (needs the target chip present)")
    ] = "estimate",
) -> AutotuneReport:
    """Sweep a kernel template's tunables: prune by legality, VMEM fit and static estimate, then compile and
    validate the best-ranked configs. Failed configs are kept as data; the best valid one is returned.
    """
    from maxkernel.tpu_tools.cost.autotune import SpaceError, autotune

    st = state_of(ctx)
    ref, tgt = resolve_reference(st.workspace, reference), check_target(target)
    if objective not in ("estimate", "measured"):
        raise ToolError(f"objective must be 'estimate' or 'measured', got {objective!r}")
    workdir = st.workspace.root / "autotune" / sha256_text(template_source)[:16]

    def sweep(progress: ProgressFn, cancel: threading.Event) -> AutotuneReport:
        ev = CancellableEvaluator(st.evaluator, cancel, progress)
        return autotune(
            ev,
            template_source,
            space,
            ref,
            tgt,
            **size_kwargs(size),
            max_configs=max_configs,
            objective=objective,
            workdir=workdir,
            check_sizes=check_sizes,
            on_progress=progress,
        )

    try:
        return await run_blocking(ctx, sweep)
    except SpaceError as e:
        raise ToolError(str(e)) from None


@functools.cache
def task_summaries() -> list[TaskSummary]:
    """Imports every task module once (~seconds), so cached for the process."""
    from maxkernel.tpu_tools.problem.tasks import list_tasks as all_tasks

    return all_tasks()


def task_detail(task: str) -> TaskDetail:
    from maxkernel.jaxbench import registry
    from maxkernel.tpu_tools.problem.tasks import summarize_task

    try:
        task_id = registry.resolve_id(task)
    except registry.UnknownTaskError as e:
        raise ToolError(mcp_hint(e)) from None
    path = registry.task_path(task_id)
    pallas = registry.pallas_reference_path(task_id)
    return TaskDetail(
        summary=summarize_task(task_id),
        reference_path=str(path),
        reference_source=path.read_text(encoding="utf-8"),
        pallas_reference_source=pallas.read_text(encoding="utf-8") if pallas else None,
    )


async def list_tasks() -> list[TaskSummary]:
    """The 50 JaxBench tasks: id, name, model, operator, dtype, full and small sizes."""
    return await anyio.to_thread.run_sync(task_summaries)


async def get_task(
    task: Annotated[str, Field(description="a JaxBench task id: '8p_GEMM', '8p' or 'GEMM'")],
) -> TaskDetail:
    """One JaxBench task: its sizes and dtype, and the reference source a kernel must match."""
    return await anyio.to_thread.run_sync(lambda: task_detail(task))


async def describe_reference(
    ctx: Context[AppState],
    reference: Reference,
    size: DefaultSize = DEFAULT_SIZE,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> ProgramDescription:
    """What a reference computes: its workload traced (jaxpr) at one size, with input specs, every
    equation (primitive, operands, output shapes, parameters as source) and a primitive census."""
    from maxkernel.tpu_tools.problem.program import describe_in_child

    st = state_of(ctx)
    ref = resolve_reference(st.workspace, reference)

    return await run_refusable(
        ctx,
        lambda progress, cancel: describe_in_child(
            st.evaluator, ref, size, timeout_s=timeout_s, on_progress=progress, cancel=cancel
        ),
    )


async def find_hotspots(
    ctx: Context[AppState],
    model: Annotated[
        str,
        Field(
            description="a model reference: a JaxBench model id ('llama3_8b_layer') or a reference module "
            "path inside the workspace whose workload is one model step"
        ),
    ],
    target: CompileTarget = DEFAULT_TARGET,
    size: DefaultSize = DEFAULT_SIZE,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="wall-clock limit for the child")] = 1800.0,
) -> HotspotReport:
    """Where a model step's time goes on a TPU target: its regions (the user's named scopes and functions,
    else attention / matmul+epilogue / norm ... found by pattern), each with flops, HBM bytes, estimated
    time and tier, share of the step, bound and headroom against its roofline; identical regions merged
    with a count. Compile-only (no chip): every number is a static estimate, labeled with its tier."""
    from maxkernel.tpu_tools.model.hotspots import hotspots_in_child

    st = state_of(ctx)
    ref = resolve_reference(st.workspace, model)
    target = check_target(target)

    return await run_refusable(
        ctx,
        lambda progress, cancel: hotspots_in_child(
            st.evaluator, ref, target, size, timeout_s=timeout_s, on_progress=progress, cancel=cancel
        ),
    )


async def extract_region(
    ctx: Context[AppState],
    model: Annotated[
        str,
        Field(
            description="a model reference: a JaxBench model id or a reference module path in the workspace"
        ),
    ],
    region: Annotated[str, Field(description="a region id from find_hotspots")],
    out: Annotated[
        str | None,
        Field(description="workspace path of the new reference file (default extracted/MODEL.REGION.py)"),
    ] = None,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="wall-clock limit for the child")] = 1800.0,
) -> ExtractReport:
    """Write one region of a model step as a standalone reference (plain JAX re-emitted from the jaxpr,
    SIZES full/small at the model's shapes, inputs drawn with the statistics the region sees in the model,
    tolerance from the dtype), checked on creation: spliced back into the model at small size, the model's
    outputs are bit-identical. Nothing is written when a check fails."""
    from pathlib import Path

    from maxkernel.server.workspace import WorkspaceError
    from maxkernel.tpu_tools.model.extract import extract_in_child

    st = state_of(ctx)
    ref = resolve_reference(st.workspace, model)
    rel = out or f"extracted/{Path(ref).stem}.{region}.py"
    try:
        path = st.workspace.resolve(rel, kind="output", must_exist=False)
    except WorkspaceError as e:
        raise ToolError(str(e)) from None
    if path.exists():
        raise ToolError(f"{rel} exists in the workspace; extract writes a new file")

    return await run_refusable(
        ctx,
        lambda progress, cancel: extract_in_child(
            st.evaluator, ref, region, str(path), timeout_s=timeout_s, on_progress=progress, cancel=cancel
        ),
    )


async def compose_kernels(
    ctx: Context[AppState],
    model: Annotated[
        str,
        Field(
            description="a model reference: a JaxBench model id or a reference module path in the workspace"
        ),
    ],
    kernels: Annotated[
        dict[str, str],
        Field(description="region id (from find_hotspots) -> kernel file path in the workspace"),
    ],
    out: Annotated[
        str | None,
        Field(description="new workspace directory for the composed step (default composed/MODEL)"),
    ] = None,
    target: CompileTarget = "tpu-v6e",
    size: DefaultSize = DEFAULT_SIZE,
    check_sizes: Annotated[
        list[str] | None,
        Field(
            description="the check sizes the composed step runs at against the model (interpret mode off "
            f"the chip): SIZES names or 'derived'; omit for {COMPOSE_CHECK_SIZES_TEXT}"
        ),
    ] = None,
    seeds: Annotated[int, Field(ge=1, le=64, description="fresh input seeds")] = 3,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="wall-clock limit")] = 1800.0,
) -> ComposeReport:
    """The model step with kernels in place of their regions (the model's other equations re-emitted as
    plain JAX, never importing the model), validated end to end against the model under the judge's rules:
    fresh seeds, the check sizes, the sandbox, no reference access. It compiles at the target size. A kernel whose outputs do not have its
    region's shapes is an error; nothing is written then. Once it matches, on a TPU target: each region's
    hotspot estimate before, its kernel's static estimate after, and the whole step by Amdahl's sum
    (estimates, never measurements)."""
    from pathlib import Path

    from maxkernel.server.workspace import WorkspaceError
    from maxkernel.tpu_tools.model.compose import compose, parse_kernels

    st = state_of(ctx)
    ref = resolve_reference(st.workspace, model)
    target = check_target(target)
    try:
        paths = {rid: str(st.workspace.resolve(p, kind="kernel")) for rid, p in kernels.items()}
        out_dir = st.workspace.resolve(out or f"composed/{Path(ref).stem}", kind="output", must_exist=False)
    except WorkspaceError as e:
        raise ToolError(str(e)) from None

    def run(progress: ProgressFn, cancel: threading.Event) -> ComposeReport:
        specs = [f"{rid}={p}" for rid, p in paths.items()]
        return compose(
            st.evaluator, ref, parse_kernels(specs), str(out_dir), target=target, size=size,
            check_sizes=check_sizes, seeds=seeds, timeout_s=timeout_s, on_progress=progress, cancel=cancel,
        )  # fmt: skip

    return await run_refusable(ctx, run)


async def port_source(
    ctx: Context[AppState],
    source: Annotated[
        str,
        Field(
            description="workspace path of a PyTorch source: KernelBench format (Model, get_inputs, "
            "get_init_inputs), an nn.Module file with an inputs function, or a Triton kernel with its launcher"
        ),
    ],
    check: Annotated[
        str | None,
        Field(description="workspace path of a port written elsewhere: check it instead of writing one"),
    ] = None,
    out: Annotated[
        str | None,
        Field(description="workspace path of the port to write (default SOURCE_port.py beside it)"),
    ] = None,
    seeds: Seeds = DEFAULT_SEEDS,
    seed_offset: SeedOffset = DEFAULT_SEED_OFFSET,
    allow_weak_check: Annotated[
        bool, Field(description="accept when a trivial output would also pass")
    ] = False,
    timeout_s: Timeout = DEFAULT_TIMEOUT_S,
) -> PortReport:
    """Port a PyTorch/Triton source to a JAX reference (CONFIG, SIZES full/small, SOURCE_PARAMS,
    create_inputs drawing activations and parameters from the key, workload), and check it against the
    source on CPU over fresh seeds with validate's tolerance and weak-check guard; or, with `check`, check
    a port written elsewhere. Runs in a child process (`maxkernel port --json`): torch never loads here."""
    import sys

    st = state_of(ctx)
    try:
        src = st.workspace.resolve(source, kind="source")
        given = st.workspace.resolve(check, kind="port") if check else None
        dest = st.workspace.resolve(out, kind="output", must_exist=False) if out else None
    except WorkspaceError as e:
        raise ToolError(str(e)) from None
    if given is not None and dest is not None:
        raise ToolError("check checks an existing port; out names a port to write: give one")
    cmd = [
        sys.executable,
        "-m",
        "maxkernel.tpu_tools.cli.main",
        "port",
        str(src),
        "--json",
        "--seeds",
        str(seeds),
    ]
    cmd += ["--check", str(given)] if given else (["--out", str(dest)] if dest else [])
    cmd += ["--seed-offset", str(seed_offset)] if seed_offset is not None else []
    cmd += ["--allow-weak-check"] if allow_weak_check else []
    try:
        with anyio.fail_after(timeout_s):
            proc = await anyio.run_process(cmd, check=False, cwd=str(st.workspace.root))
    except TimeoutError:
        raise ToolError(f"port_source ran past timeout_s={timeout_s:g}") from None
    text = proc.stdout.decode(errors="replace").strip()
    if text:
        return PortReport.model_validate_json(text)
    err = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
    raise ToolError(err.removeprefix("maxkernel: "))


def list_chips() -> list[ChipSpec]:
    """TPU generations a kernel can target: VMEM, SMEM, HBM size and bandwidth, peak FLOP/s, MXU shape."""
    return list(CHIPS.values())


def register(server: MCPServer) -> None:
    for fn, title in [
        (compile_kernel, "Compile a Pallas kernel for a TPU"),
        (validate_kernel, "Validate a kernel against its reference"),
        (profile_kernel, "Profile a kernel"),
        (evaluate_kernel, "Compile, validate and profile a kernel"),
        (summarize_trace, "Summarize a profiler trace"),
        (estimate_kernel, "Estimate a kernel's TPU time (static model)"),
        (analyze_kernel, "Analyze a kernel with the TPU compiler's schedule"),
        (autotune_kernel, "Autotune a kernel template"),
    ]:
        server.tool(title=title, annotations=EVALUATES)(fn)
    for fn, title in [
        (list_tasks, "List the JaxBench tasks"),
        (get_task, "Get a JaxBench task"),
        (describe_reference, "Describe a reference's traced program"),
        (find_hotspots, "Find a model step's hot regions on a TPU (static estimate)"),
        (list_chips, "List TPU chips"),
    ]:
        server.tool(title=title, annotations=READS)(fn)
    server.tool(title="Extract a model region as a reference", annotations=WRITES)(extract_region)
    server.tool(title="Compose kernels into a model and validate it", annotations=WRITES)(compose_kernels)
    server.tool(title="Port a PyTorch/Triton source to JAX, checked on CPU", annotations=WRITES)(port_source)
