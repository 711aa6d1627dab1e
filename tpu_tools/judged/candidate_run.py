"""Validation, judged side: the only child that runs candidate code. It never sees the reference.

It gets the inputs as files in its scratch dir, scrubs argv and the environment, fingerprints the judge's
functions and arms an audit hook (integrity.py), imports the candidate, reads its traced program (host
callbacks, where the work runs: work_check.py), then runs every input set more than once in the order
the parent chose and writes every run's outputs. The verdict on the numbers is the parent's.

Off the chip the candidate is traced as the target chip (target_trace.py) and that traced program is
what TPU interpret mode runs; where jax's interpreter itself fails, the failure is `interpret_unsupported`
(interpreter_limits.py), not the kernel's, unless what it raised is a check it makes on the kernel (a
revisited output block, an out-of-bounds block or access: interpreter_findings.py), a negative verdict.
"""

from __future__ import annotations

import contextlib
import io
import sys
import traceback
from pathlib import Path

from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.megacore import cores_per_device, interpret_cores
from maxkernel.tpu_tools.hardware.mesh import (
    MeshSpec,
    job_mesh,
    output_sharding,
    place,
    sharded_shapes,
    unpartitioned_kernels,
    xla_moves,
)
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged import job_env
from maxkernel.tpu_tools.judged.classify import classify_exception, unpartitioned_failure
from maxkernel.tpu_tools.judged.integrity import Guard, static_patch_scan
from maxkernel.tpu_tools.judged.interpreter_findings import KernelFinding, kernel_finding
from maxkernel.tpu_tools.judged.interpreter_limits import (
    InterpreterFailure,
    interpreter_failure,
    jaxpr_workload,
    lowering_rules,
    vmapped_semantics,
)
from maxkernel.tpu_tools.judged.sequential_grid import sequential_workload
from maxkernel.tpu_tools.judged.target_trace import trace_as_target, traced_as
from maxkernel.tpu_tools.pool.handover import HandoverError, as_jax, load_arrays, load_specs, save_arrays
from maxkernel.tpu_tools.problem.kernel_program import kernel_program
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls
from maxkernel.tpu_tools.problem.work_check import (
    WorkCensus,
    callback_verdict,
    census_of,
    collective_verdict,
    work_verdict,
)
from maxkernel.tpu_tools.reports import Failure, ValidationReport

_TRACE_LIMIT = 3000
_STAGE_WORDS = {
    "trace": "while traced",
    "compile": "while compiled",
    "run": "while running",
    "load": "on import",
}


def candidate_frames(exc: BaseException, path: Path, limit: int = _TRACE_LIMIT) -> str:
    """The candidate's own traceback lines and the error (capped): no jax internals, no environment."""
    frames = []
    for f in traceback.extract_tb(exc.__traceback__):
        try:
            mine = Path(f.filename).resolve().parent == path.parent
        except OSError:
            mine = False
        if mine:
            frames.append(f"  {Path(f.filename).name}:{f.lineno} in {f.name}: {(f.line or '').strip()}")
    text = "\n".join([*frames[-10:], f"{type(exc).__name__}: {str(exc)[:1500]}"])
    return text[:limit]


def _base_exception_failure(exc: BaseException, stage: str, path: Path) -> Failure:
    """KeyboardInterrupt, GeneratorExit, ... raised by the candidate: its failure, not ours."""
    line = None
    for f in traceback.extract_tb(exc.__traceback__):
        with contextlib.suppress(OSError):
            if Path(f.filename).resolve() == path:
                line = f.lineno
    where = f" (candidate line {line})" if line else ""
    return Failure(
        kind="python_error",
        summary=f"the candidate raised {type(exc).__name__} ({_STAGE_WORDS.get(stage, stage)}){where}",
        message=candidate_frames(exc, path),
        stage=stage,
        line=line,
    )


def interpret_unsupported(found: InterpreterFailure, exc: BaseException, stage: str) -> Failure:
    """jax's TPU interpreter failed where the candidate did not raise: the numbers cannot be checked off
    the chip. Not a verdict on the kernel, and not a pass."""
    return Failure(
        kind="interpret_unsupported",
        summary=(
            f"TPU interpret mode cannot run this kernel: jax's {found.function} failed "
            f"({_STAGE_WORDS.get(stage, stage)}, entered through {found.entry}): {found.error}; the "
            "interpreter raised it, not the kernel, so its numbers could not be checked off the chip"
        )[:1500],
        message="".join(traceback.format_exception(exc))[-6000:],
        stage=stage,
    )


def interpreter_finding(finding: KernelFinding, exc: BaseException, stage: str) -> Failure:
    """A fault of the kernel's that jax's interpreter checks for and raised (a revisited output block,
    an out-of-bounds block or access): a negative verdict in one sentence, the traceback as evidence."""
    return Failure(
        kind=finding.kind,
        summary=f"{finding.summary} (caught by TPU interpret mode {_STAGE_WORDS.get(stage, stage)})"[:1500],
        message="".join(traceback.format_exception(exc))[-6000:],
        stage=stage,
    )


def _calls(program) -> list:
    """The program's pallas_calls, to name the kernel a finding is about ([]: unreadable)."""
    try:
        return find_pallas_calls(program)
    except Exception:  # noqa: BLE001 - our reading of an unusual jaxpr must not hide the finding
        return []


def _failure(exc: BaseException, stage: str, path: Path, *, program=None, rules=None) -> Failure:
    """`program`: the candidate's traced program where it was interpreted off the chip, so that the
    interpreter itself may be what failed (`interpret_unsupported`); `rules`: the lowering rules before
    the candidate was imported (interpreter_limits.lowering_rules)."""
    if not isinstance(exc, Exception):
        return _base_exception_failure(exc, stage, path)
    found = interpreter_failure(exc, path, program, rules or {}) if program is not None else None
    if found is not None and not found.vetoed:
        if (finding := kernel_finding(found, _calls(program), str(exc))) is not None:
            return interpreter_finding(finding, exc, stage)
        return interpret_unsupported(found, exc, stage)
    failure = classify_exception(exc, stage, path)
    failure.message = (
        candidate_frames(exc, path, 6000)
        if failure.kind in ("python_error", "runtime_error")
        else (failure.message[:6000])
    )
    if found is not None:  # say why it is not the interpreter's limit
        where = (
            f"raised in jax's {found.function}" if found.function else "raised inside jax's TPU interpreter"
        )
        failure.message = (
            f"{where}, but not judged an interpreter limit: {found.vetoed}\n{failure.message}"
        )[:6000]
    return failure


def _kernel_program(jaxpr):
    """The kernel program at this size (judge/sizes.py compares it with the target's; None: unreadable)."""
    try:
        return kernel_program(jaxpr)
    except Exception:  # noqa: BLE001 - our reading of an unusual jaxpr must not fail the candidate
        return None


def _forget_reference_modules() -> None:
    """Task sources preloaded by the forkserver must not sit in sys.modules for the candidate to find."""
    for name in list(sys.modules):
        if name.startswith(("maxkernel.jaxbench", "_maxkernel_reference_")):
            sys.modules.pop(name, None)


def candidate_job(
    kernel_path: str,
    target: str,
    scratch_dir: str,
    seeds: list[int],
    order: list[int],
    size: str,
    hide_paths: list[str],
    reference_census: dict | None = None,
    allow_plain_jax: bool = False,
    mesh: dict | None = None,
    absent_inputs: list[int] | None = None,
) -> dict:
    """Pool job (judged side). Returns a partial ValidationReport; run outputs go to scratch/out_<seed>_<k>.

    `mesh` (the reference's MESH): the global inputs are sharded over that many devices (CPU devices
    in TPU interpret mode, the pool started the backend with them) and the candidate runs under
    `jax.set_mesh`, so its `shard_map` needs no mesh of its own.
    """
    job_env.scrub()
    import jax

    from maxkernel.tpu_tools.hardware.env_info import environment
    from maxkernel.tpu_tools.judged.candidate import load_candidate
    from maxkernel.tpu_tools.pool.workers import report_progress

    _forget_reference_modules()
    report = ValidationReport(ok=False, target=target, size=size, kernel_path=kernel_path, seeds=seeds)
    report.environment = environment()
    scratch = Path(scratch_dir)
    try:
        tgt = parse_target(target)
        specs = load_specs(scratch / "input_specs.json")
        inputs = {s: as_jax(load_arrays(scratch, f"inputs_{s}", expect=specs)) for s in set(order)}
    except (UsageError, HandoverError) as e:
        report.failure = Failure(kind="usage_error", summary=str(e), stage="load")
        return report.model_dump(mode="json")
    plan = execution.plan_for(tgt)
    mesh_spec = MeshSpec.model_validate(mesh) if mesh else None
    # A kernel over a mesh is checked for races on any interpreted target: its semaphores are its logic.
    detect_races = not plan.native and (tgt.kind == "tpu" or mesh_spec is not None)
    report.execution = plan.description + (" (race detection on)" if detect_races else "")
    eager = mesh_spec is not None  # remote DMAs: see execution.interpret_params
    scope = (
        contextlib.nullcontext()
        if plan.native
        else execution.tpu_interpret_mode(detect_races=detect_races, eager_dma=eager)
    )
    guard = Guard(hide_paths)
    jit, block, races_found = jax.jit, jax.block_until_ready, execution.races_found

    def integrity_failure() -> Failure | None:
        tampered, reached = guard.check()
        if reached:
            return Failure(kind="reached_reference", summary=reached, stage="run")
        if tampered:
            return Failure(
                kind="tampered", summary=f"the candidate tampered with the judge: {tampered}", stage="run"
            )
        return None

    def done(failure: Failure | None) -> dict:
        report.failure = integrity_failure() or failure
        report.ok = report.failure is None  # provisional: the parent judges the numbers
        return report.model_dump(mode="json")

    def run() -> dict:
        rules = lowering_rules()  # before the candidate's import: the rules it brings are told apart
        report_progress("candidate: load")
        try:
            cand = load_candidate(kernel_path, absent_inputs)
        except UsageError as e:
            return done(Failure(kind="usage_error", summary=str(e), stage="load"))
        except CandidateLoadError as e:
            return done(
                Failure(
                    kind="load_error",
                    summary=str(e),
                    message=e.detail[-_TRACE_LIMIT:],
                    stage="load",
                    line=e.line,
                )
            )
        report.kernel_sha256 = cand.sha256
        path = Path(cand.path)
        patches = static_patch_scan(path.read_text(errors="replace"))
        if patches:  # a hint for the reader; the fingerprints decide
            report.warnings.append("the source patches imported modules (static scan): " + "; ".join(patches))
        shapes = [jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in specs]
        run_inputs, jit_kw = inputs, {}
        with scope, contextlib.ExitStack() as stack:
            if mesh_spec is not None:
                try:
                    devices = job_mesh(mesh_spec, plan.native)
                    run_inputs = {s: place(v, mesh_spec, devices) for s, v in inputs.items()}
                except Exception as e:  # noqa: BLE001 - the judge's setup, before any candidate code ran
                    why = f"could not lay the inputs out over the mesh: {type(e).__name__}: {e}"[:1000]
                    return done(Failure(kind="internal_error", summary=why, stage="load"))
                stack.enter_context(jax.set_mesh(devices))
                shapes = list(sharded_shapes(shapes, mesh_spec, devices))
                jit_kw = {"out_shardings": output_sharding(mesh_spec, devices)}
                report.devices = mesh_spec.device_count
                where = "chips" if plan.native else "CPU devices, remote DMAs eager"
                report.execution += f"; over a mesh {mesh_spec.describe()} ({where})"
            # Off the chip (no mesh) the candidate is traced as the target chip and the traced program is
            # what the interpreter runs: a kernel that asks for the chip at trace time sees the target.
            as_target = not plan.native and tgt.kind == "tpu" and tgt.chip is not None and mesh_spec is None
            from_jaxpr = not plan.native and mesh_spec is None

            def trace():
                with trace_as_target(tgt) if as_target else contextlib.nullcontext():
                    return jax.make_jaxpr(cand.workload, return_shape=True)(*shapes)

            report_progress("candidate: trace")  # the parent's clock times each step (judge/phases.py)
            try:
                jaxpr, out_shape = trace()
                census = census_of(jaxpr)
            except SystemExit:
                raise
            except BaseException as e:  # noqa: BLE001 - the candidate's failure, whatever it raised
                return done(_failure(e, "trace", path))
            if as_target:
                report.execution += f"; {traced_as(tgt)}, then interpreted on CPU"
            program = jaxpr  # what ran: an interpreter failure is told apart from the candidate's by it
            report.program = _kernel_program(jaxpr)
            report.has_pallas_call = census.num_pallas_calls > 0
            report.work = census
            if mesh_spec is not None and (n := unpartitioned_kernels(jaxpr)):
                return done(unpartitioned_failure(n, mesh_spec.describe()))
            if (why := callback_verdict(census)) is not None:
                return done(Failure(kind="host_callback", summary=why, stage="trace"))
            if not report.has_pallas_call and not allow_plain_jax:
                return done(
                    Failure(
                        kind="no_kernel",
                        summary="no kernel: the candidate contains no pallas_call (pass allow_plain_jax to accept JAX rewrites)",
                        stage="trace",
                    )
                )
            ref_census = WorkCensus.model_validate(reference_census) if reference_census else None
            if not allow_plain_jax and (why := work_verdict(census, ref_census)) is not None:
                return done(Failure(kind="work_outside_kernel", summary=why, stage="trace"))
            if mesh_spec and not allow_plain_jax and (why := collective_verdict(census)) is not None:
                return done(Failure(kind="work_outside_kernel", summary=why, stage="trace"))
            race_log = io.StringIO()
            # Megacore targets (v4, v5p): one interpreter thread per TensorCore wherever a kernel has a
            # "parallel" axis, so a reduction wrongly marked parallel races or answers wrong.
            cores = (
                1
                if plan.native
                else interpret_cores(tgt.chip.name if tgt.chip else None, find_pallas_calls(jaxpr))
            )
            if cores > 1:
                report.execution += f"; {cores} interpreter threads, one per TensorCore (megacore split)"
                stack.enter_context(
                    execution.tpu_interpret_mode(detect_races=detect_races, cores=cores, eager_dma=eager)
                )
            workload = cand.workload
            if from_jaxpr:
                if cores > 1:  # the interpreter's settings are taken at trace time: trace under them
                    try:
                        jaxpr, out_shape = trace()
                    except SystemExit:
                        raise
                    except BaseException as e:  # noqa: BLE001
                        return done(_failure(e, "trace", path))
                jaxpr, vmapped = vmapped_semantics(jaxpr)
                workload = jaxpr_workload(jaxpr, jax.tree_util.tree_structure(out_shape))
                if vmapped:
                    report.execution += (
                        f"; vmapped grid axes of {', '.join(sorted(set(vmapped)))} interpreted as parallel, as "
                        "Mosaic compiles them (jax's interpreter fails on them otherwise: safe_zip length mismatch)"
                    )
            if not plan.native and (seq := sequential_workload(workload, jaxpr)) is not None:
                workload, axes = seq
                chip = tgt.chip.name if tgt.chip else None
                n = cores_per_device(chip)
                one_core = (
                    "the order a one-TensorCore chip runs every grid in"
                    if n <= 1
                    else f"{chip} splits parallel axes across its {n} TensorCores: that split was not "
                    "interpreted for this axis"
                )
                report.execution += (
                    f"; {' and '.join(axes)} has a traced length and is marked parallel: TPU interpret mode "
                    f"cannot shuffle an axis of unknown length, so it ran in sequential order ({one_core})"
                )
                report.warnings.append(
                    f"{' and '.join(axes)}: traced length marked parallel, interpreted in sequential order "
                    "only (an interpreter limit, not a kernel fault; the order along it was not varied)"
                )
            report_progress("candidate: compile")
            try:
                compiled = jit(workload, **jit_kw).lower(*run_inputs[order[0]]).compile()
            except SystemExit:
                raise
            except BaseException as e:  # noqa: BLE001
                return done(
                    _failure(e, "compile", path, program=None if plan.native else program, rules=rules)
                )
            if mesh_spec is not None and not allow_plain_jax:
                if guard.changed_so_far():  # the HLO is read through jax: only while jax is untouched
                    return done(None)  # done() names the tampering
                if (what := xla_moves(compiled)) is not None:
                    return done(
                        Failure(
                            kind="work_outside_kernel",
                            summary=f"XLA moves the data between devices itself ({what} in the compiled "
                            "program): a collective outside the kernels, or a reshard because the shard_map's "
                            "specs differ from the MESH's; a multi-chip kernel moves its data with remote DMAs "
                            "inside its pallas_calls",
                            stage="compile",
                        )
                    )
            count: dict[int, int] = {}
            for call, seed in enumerate(order):
                report_progress(f"candidate run {call + 1}/{len(order)} (seed {seed})")
                k = count.get(seed, 0)
                count[seed] = k + 1
                try:
                    with contextlib.redirect_stdout(race_log):
                        out = block(compiled(*run_inputs[seed]))
                        races = detect_races and races_found()
                except SystemExit:
                    raise
                except BaseException as e:  # noqa: BLE001
                    return done(
                        _failure(e, "run", path, program=None if plan.native else program, rules=rules)
                    )
                if races:
                    report.races_found = True
                    text = race_log.getvalue().strip()
                    first = text.splitlines()[1].strip() if text.count("\n") else text
                    return done(
                        Failure(
                            kind="race",
                            summary=f"data race detected in TPU interpret mode (seed {seed}): {first}",
                            message=text[:6000],
                            stage="run",
                        )
                    )
                save_arrays(scratch, f"out_{seed}_{k}", list(jax.tree_util.tree_leaves(out)))
        return done(None)

    guard.arm()
    try:
        return run()
    except SystemExit:
        raise
    except BaseException:
        # our code broke after the candidate was imported: if the candidate changed what we rely on, say so
        if (failure := integrity_failure()) is not None:
            report.failure, report.ok = failure, False
            return report.model_dump(mode="json")
        raise
