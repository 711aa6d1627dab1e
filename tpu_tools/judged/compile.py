"""Compile a candidate for a target with the reference's input shapes, timing each stage (runs in a pool child)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of
from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
from maxkernel.tpu_tools.hardware import execution, mesh
from maxkernel.tpu_tools.hardware.env_info import seal
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.candidate import load_candidate
from maxkernel.tpu_tools.judged.classify import classify_exception, load_failure, unpartitioned_failure
from maxkernel.tpu_tools.judged.sequential_grid import sequential_workload
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.kernel_program import kernel_program
from maxkernel.tpu_tools.reports import ArraySpec, CompileReport, Failure, StageTimes


def _specs(tree) -> list[ArraySpec]:
    import jax

    return [ArraySpec(shape=list(x.shape), dtype=str(x.dtype)) for x in jax.tree_util.tree_leaves(tree)]


def pallas_calls_of(jaxpr) -> list[dict[str, Any]]:
    """Grid, blocks and scratch of every pallas_call in a traced jaxpr."""
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    return [c.model_dump(mode="json") for c in find_pallas_calls(jaxpr)]


def _program(jaxpr):
    """The kernel program at this size, for validate to compare with the check sizes' (None: unreadable)."""
    try:
        return kernel_program(jaxpr)
    except Exception:  # noqa: BLE001 - an unusual jaxpr must not fail a compile; validate says it could not tell
        return None


def _memory_stats(compiled) -> dict[str, int]:
    try:
        stats = compiled.memory_analysis()
    except Exception:
        return {}
    if stats is None:
        return {}
    keys = (
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "temp_size_in_bytes",
        "generated_code_size_in_bytes",
        "alias_size_in_bytes",
    )
    return {k: int(getattr(stats, k)) for k in keys if hasattr(stats, k)}


def compile_job(
    kernel_path: str, target: str, size: str, reference_side: dict, hide_paths: list[str] | None = None
) -> dict:
    """Pool job (judged side): compile the candidate for the reference's shapes. It never sees the reference.

    Importing and tracing the candidate runs its Python, so the same integrity guard as the candidate run
    (judged/integrity.py) is armed first: a touch of a hidden path (`hide_paths`: the reference, the task
    sources) is `reached_reference`, a change to what the judge relies on is `tampered`.
    """
    from maxkernel.tpu_tools.judged import job_env
    from maxkernel.tpu_tools.judged.integrity import Guard, ShippedGuard, shipped_with_jaxbench
    from maxkernel.tpu_tools.reports import ReferenceSide

    job_env.scrub()
    side = ReferenceSide.model_validate(reference_side)
    # a program shipped in JaxBench's tasks (bench compiles a task's own baseline and Pallas reference)
    # imports JaxBench's shared helpers; every other hidden path stays refused
    guard_type = ShippedGuard if shipped_with_jaxbench(kernel_path) else Guard
    guard = guard_type(list(hide_paths or ()), extra_modules=(__name__,))
    guard.arm()
    try:
        report = compile_with_specs(kernel_path, target, size, side)
    except SystemExit:
        raise
    except BaseException:
        # our code broke after the candidate was imported: if the candidate changed what we rely on, say so
        if (failure := _integrity_failure(guard)) is None:
            raise
        broken = CompileReport(ok=False, target=target, size=size, kernel_path=kernel_path, failure=failure)
        return broken.model_dump(mode="json")
    if (failure := _integrity_failure(guard)) is not None:
        report.failure, report.ok = failure, False
    _patch_hint(report, kernel_path)
    return report.model_dump(mode="json")


def _patch_hint(report: CompileReport, kernel_path: str) -> None:
    """A hint for the reader, as the candidate run gives it: the fingerprints decide, this names the lines."""
    from maxkernel.tpu_tools.judged.integrity import static_patch_scan

    try:
        patches = static_patch_scan(Path(kernel_path).read_text(errors="replace"))
    except OSError:
        return
    if patches:
        report.warnings.append("the source patches imported modules (static scan): " + "; ".join(patches))


def _integrity_failure(guard) -> Failure | None:
    """The guard's verdict after the compile: reaching a hidden path before tampering, as in the candidate run."""
    tampered, reached = guard.check()
    if reached:
        return Failure(kind="reached_reference", summary=reached, stage="load")
    if tampered:
        return Failure(
            kind="tampered", summary=f"the candidate tampered with the judge: {tampered}", stage="load"
        )
    return None


def compile_with_specs(kernel_path: str, target_name: str, size: str, side) -> CompileReport:
    import jax

    started = time.perf_counter()
    report = CompileReport(ok=False, target=target_name, size=size, kernel_path=kernel_path)
    report.reference = side.reference
    report.size_note = side.size_note
    report.expected_output = list(side.output_specs)

    done: list[str] = []  # the stages that ran to the end: the note says only these

    def finish(failure: Failure | None = None) -> CompileReport:
        if report.compiler_note:
            ran = ", ".join(done) if done else "nothing done"
            end = f"; stopped at {stage_now[0]} ({failure.kind})" if failure is not None and stage_now else ""
            report.compiler_note = f"{report.compiler_note} ({ran}{end})"
        return seal(report, started, failure)

    stage_now: list[str] = []

    in_shapes = [jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in side.input_specs]
    try:
        target = parse_target(target_name)
    except UsageError as e:
        return finish(load_failure(e))
    try:
        cand = load_candidate(kernel_path, side.absent_inputs)
    except (UsageError, CandidateLoadError) as e:
        return finish(load_failure(e))
    report.kernel_sha256 = cand.sha256

    plan = execution.plan_for(target)
    aot = target.kind == "tpu" and not plan.native
    lowering_only = False
    if aot:
        scope = trace_as_target(target)  # tracing sees the chip (get_tpu_info, the default device)
        try:
            sharding = execution.aot_sharding(target)
        except Exception as e:  # no libtpu here: the lowering rules still run, the Mosaic compiler cannot
            lowering_only = True
            args = list(in_shapes)
            report.compiler = "lowering-only"
            report.compiler_note = (
                f"libtpu compile-only devices unavailable ({type(e).__name__}: {str(e).splitlines()[0][:200]}): "
                "ran the Pallas->Mosaic lowering rules for the target, NOT the Mosaic compiler (VMEM overflow "
                "and Mosaic errors are not checked); install jax[tpu] for the real compile"
            )
            report.warnings.append("lowering only: the real TPU compiler did not run")
        else:
            args = [jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding) for s in in_shapes]
            report.compiler = "mosaic-tpu-aot"  # compile only: how it would run is validate's to say
            report.compiler_note = (
                f"{target.chip.name} absent: the real Mosaic TPU compiler, for a libtpu compile-only "
                f"{target.chip.topology} device, at size {size!r}; compile only, nothing executed"
            )
    elif plan.native:
        args = list(in_shapes)
        scope = contextlib.nullcontext()
        report.compiler = "mosaic-tpu" if target.kind == "tpu" else "xla-local"
        report.compiler_note = plan.description
    else:
        args = list(in_shapes)
        scope = execution.tpu_interpret_mode()
        report.compiler, report.compiler_note = "xla-cpu-interpret", plan.description

    spec = side.reference.mesh if side.reference else None
    jit_kw: dict = {}
    if spec is not None:  # a kernel over a mesh: the global shapes, sharded over that many devices
        try:
            if aot and not lowering_only:
                devices = mesh.topology_mesh(spec, target.name)
                report.topology = mesh.topology_name(target.name, spec.device_count)
            elif aot:
                return finish(
                    Failure(
                        kind="internal_error", summary="a mesh kernel needs libtpu's topologies", stage="load"
                    )
                )
            else:
                devices = mesh.job_mesh(spec, plan.native)
        except UsageError as e:
            return finish(load_failure(e))
        # on a topology the mesh names the chip; off it, the interpreter's scope stays around the mesh
        scope = jax.set_mesh(devices) if aot else _nested(scope, jax.set_mesh(devices))
        args = list(mesh.sharded_shapes(in_shapes, spec, devices))
        jit_kw = {"out_shardings": mesh.output_sharding(spec, devices)}
        report.devices = spec.device_count
        report.compiler_note = (
            f"{target.chip.name} absent: the real Mosaic TPU compiler, for the libtpu compile-only "
            f"{report.topology} topology, at size {size!r}, over a mesh {spec.describe()}; compile only, "
            "nothing executed"
            if report.topology
            else f"{report.compiler_note}; over a mesh {spec.describe()}"
        )

    path = Path(cand.path)
    stage = "trace"
    stage_now.append(stage)
    with scope:
        try:
            t0 = time.perf_counter()
            workload = cand.workload
            if (
                report.compiler == "xla-cpu-interpret"
            ):  # the interpreter cannot shuffle a traced parallel axis
                if (seq := sequential_workload(workload, jax.make_jaxpr(workload)(*args))) is not None:
                    workload, axes = seq
                    report.warnings.append(
                        f"{' and '.join(axes)}: traced length marked parallel, interpreted in sequential order "
                        "(an interpreter limit, not a kernel fault)"
                    )
            traced = jax.jit(workload, **jit_kw).trace(*args)
            done.append("traced")
            report.times = StageTimes(trace_ms=_ms(t0))
            report.pallas_calls = pallas_calls_of(traced.jaxpr)
            report.program = _program(traced.jaxpr)
            report.warnings.extend(_work_warnings(traced.jaxpr, side))
            report.num_pallas_calls = len(report.pallas_calls)
            if spec is not None and (n := mesh.unpartitioned_kernels(traced.jaxpr)):
                return finish(unpartitioned_failure(n, spec.describe()))
            report.output = _specs(traced.out_info)
            if report.output != report.expected_output:
                return finish(
                    Failure(
                        kind="shape_mismatch",
                        summary=f"output {_fmt(report.output)} differs from the reference's {_fmt(report.expected_output)}",
                        stage="trace",
                    )
                )
            if target.kind == "tpu" and (over := body_refusal(traced.jaxpr, target_name)) is not None:
                return finish(over)
            stage = stage_now[0] = "lower"
            t0 = time.perf_counter()
            lowered = traced.lower(lowering_platforms=("tpu",)) if lowering_only else traced.lower()
            done.append("lowered")
            report.times.lower_ms = _ms(t0)
            if lowering_only:
                return finish()
            stage = stage_now[0] = "compile"
            t0 = time.perf_counter()
            compiled = lowered.compile()
            done.append("compiled")
            report.times.compile_ms = _ms(t0)
        except Exception as e:
            failure = classify_exception(e, stage, path, physical_vmem_bytes=_physical_vmem(target_name))
            if failure.kind == "python_error":  # the candidate's own frames, never the judge's or its env
                from maxkernel.tpu_tools.judged.candidate_run import candidate_frames

                failure.message = candidate_frames(e, path, 6000)
            return finish(failure)
        except SystemExit:  # the child exits: the pool reports how (`exited`, with the code)
            raise
        except BaseException as e:  # KeyboardInterrupt & co. raised by the candidate: its failure
            from maxkernel.tpu_tools.judged.candidate_run import _base_exception_failure

            return finish(_base_exception_failure(e, stage, path))
    if spec is not None and (what := mesh.xla_moves(compiled)) is not None:
        report.warnings.append(
            f"validate will refuse it (work_outside_kernel) unless plain JAX is allowed: XLA moves the "
            f"data between devices itself ({what})"
        )
    report.memory = _memory_stats(compiled)
    report.cost_analysis = cost_analysis_of(compiled)
    if report.num_pallas_calls == 0:
        report.warnings.append(
            "no pallas_call in the candidate: it is plain JAX (validate reports 'no kernel' by default)"
        )
    if not aot and not plan.native and report.num_pallas_calls and spec is None:
        report.warnings.extend(_tpu_lowering_check(cand.workload, in_shapes, path))
    return finish()


@contextlib.contextmanager
def _nested(outer, inner):
    with outer, inner:
        yield


def _work_warnings(jaxpr, side) -> list[str]:
    """What validate will refuse, said at compile time already (host callbacks, work outside the kernels)."""
    from maxkernel.tpu_tools.problem.work_check import callback_verdict, census_of, work_verdict

    try:
        census = census_of(jaxpr)
    except Exception:  # noqa: BLE001 - an unusual jaxpr must not fail a compile
        return []
    out = []
    if (why := callback_verdict(census)) is not None:
        out.append(f"validate will refuse it (host_callback): {why}")
    if (why := work_verdict(census, side.census)) is not None:
        out.append(f"validate will refuse it (work_outside_kernel) unless plain JAX is allowed: {why}")
    return out


def _tpu_lowering_check(fn, in_shapes, path: Path) -> list[str]:
    """Interpret mode accepts illegal TPU blocks, so also run the Pallas->Mosaic lowering rules (no compile)."""
    import jax

    target = parse_target("tpu-v6e")
    try:
        with execution.abstract_tpu_mesh(target):
            jax.jit(fn).trace(*in_shapes).lower(lowering_platforms=("tpu",))
    except Exception as e:
        return [f"would not lower for TPU: {classify_exception(e, 'lower', path).summary}"]
    return []


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def _fmt(specs: list[ArraySpec]) -> str:
    return ", ".join(f"{s.dtype}{s.shape}" for s in specs) or "nothing"


def body_refusal(jaxpr, target_name: str) -> Failure | None:
    """A kernel-body value larger than the chip's VMEM, or over the compile's tile budget, fails here,
    before minutes of Mosaic work."""
    from maxkernel.tpu_tools.problem.kernel_values import refusal

    r = refusal(jaxpr, _physical_vmem(target_name), target_name)
    if r is None:
        return None
    return Failure(
        kind=r.kind,
        summary=r.message,
        stage="trace",
        line=r.value.line,
        requested_bytes=r.value.nbytes if r.kind == "vmem_exhausted" else None,
        capacity_bytes=r.capacity_bytes,
    )


def _physical_vmem(target: str) -> int | None:
    """The target chip's physical VMEM (None off the TPU targets)."""
    from maxkernel.tpu_tools.hardware.chips import CHIPS

    chip = CHIPS.get(target)
    return chip.vmem_bytes if chip is not None else None
