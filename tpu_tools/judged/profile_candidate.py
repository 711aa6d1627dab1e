"""The candidate's side of `profile` (a pool job): the only process that runs candidate code. It never sees the reference.

Its inputs are arrays in its scratch folder (two warm-up sets at start; each timed set only after the
previous timed call ended, see timed_loop.py); it knows the reference only as output shapes and the
reference's flop count, handed in as plain data. It traces the candidate (pallas_calls, output shapes,
the static estimate), compiles it, warms up, then runs the judge's timing loop. Everything it reports
is checked by the parent: the outputs against the reference's, its clock against the parent's, its
fingerprints of the clock and of `jax.block_until_ready` before and after the candidate ran.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.mesh import MeshSpec, aot_args
from maxkernel.tpu_tools.judged import integrity, timed_loop
from maxkernel.tpu_tools.judged.classify import classify_exception, load_failure
from maxkernel.tpu_tools.judged.compile import body_refusal
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.judged.timed_loop import (
    WARMUP_SETS,
    CandidateSide,
    _describe_device,
    _named,
    _timed_with_device,
    capture_trace,
    warm_up,
)
from maxkernel.tpu_tools.pool import handover
from maxkernel.tpu_tools.reports import ArraySpec, Failure

_shipped_with_jaxbench = integrity.shipped_with_jaxbench
_ShippedGuard = integrity.ShippedGuard


@contextlib.contextmanager
def _guard_paused(guard):
    """Our own profiler start/stop installs a tracer: not the candidate's doing."""
    armed, guard._armed = guard._armed, False
    try:
        yield
    finally:
        guard._armed = armed


def _distrust_cost_estimates(calls: list, reference_flops: float | None, side: CandidateSide) -> list:
    """A `pl.CostEstimate` declaring under half the reference's flops is the candidate's word only: drop it."""
    declared = [c for c in calls if c.cost_estimate is not None]
    if not declared or not reference_flops:
        return calls
    total = sum(float(c.cost_estimate.flops) for c in declared)
    if total >= 0.5 * reference_flops:
        return calls
    side.warnings.append(
        f"pl.CostEstimate declares {total:.3g} flops, under half the reference's {reference_flops:.3g}: "
        "ignored for the static estimate"
    )
    return [c.model_copy(update={"cost_estimate": None}) for c in calls]


def _values(in_specs: list, warm: list, given: dict | None) -> list | None:
    """Per input, its values where they decide data-dependent work (small integer tables), else None:
    the first warm-up set's when arrays were built, else the reference's (estimate only)."""
    import numpy as np

    from maxkernel.tpu_tools.cost.data_work import MAX_ELEMENTS

    out: list = [None] * len(in_specs)
    for i, spec in enumerate(in_specs):
        if (
            warm
            and np.issubdtype(np.dtype(spec.dtype), np.integer)
            and np.asarray(warm[0][i]).size <= MAX_ELEMENTS
        ):
            out[i] = np.asarray(warm[0][i])
        elif given and (str(i) in given or i in given):
            out[i] = np.asarray(given.get(str(i), given.get(i)), dtype=spec.dtype)
    return out if any(v is not None for v in out) else None


def _specs(tree) -> list[tuple[tuple[int, ...], str]]:
    import jax

    return [(tuple(x.shape), handover.dtype_name(x)) for x in jax.tree_util.tree_leaves(tree)]


def candidate_job(
    kernel_path: str,
    target: str,
    size: str,
    scratch_dir: str,
    input_specs: list[dict],
    output_specs: list[dict],
    timed_sets: int,
    reference_flops: float | None = None,
    io_bytes: float | None = None,
    measure_interpret: bool = False,
    warmups: int = 3,
    warmup_min_time_s: float = 0.25,
    trace_dir: str | None = None,
    top: int = 15,
    hide_paths: list[str] | None = None,
    mesh: dict | None = None,
    absent_inputs: list[int] | None = None,
    estimate_only: str | None = None,
    input_values: dict | None = None,
) -> dict:
    """Pool job: returns a CandidateSide as a JSON-able dict.

    `input_values` (the reference's small integer inputs by position, estimate only): the static estimate
    costs the kernels' data-dependent work from them; with arrays given, from the first warm-up set's.

    `estimate_only` (the reason, from the reference's side): no arrays are given and nothing runs; the
    candidate is traced on the abstract shapes and costed (its static estimate) only.

    `mesh` (the reference's MESH): off the chip such a kernel is traced over the N-chip topology and
    estimated per chip; it is never run here (one process, one CPU device).
    """
    from maxkernel.tpu_tools.cost.llo_dump import enable_dump_for
    from maxkernel.tpu_tools.judged import job_env

    job_env.scrub()
    enable_dump_for(target)  # before the backend starts: the static estimate from the compiler's schedule
    side = CandidateSide()
    guard = (_ShippedGuard if _shipped_with_jaxbench(kernel_path) else integrity.Guard)(
        list(hide_paths or [])
    )
    before = timed_loop.clock_fingerprints()  # before any candidate code is imported
    integrity.fingerprint()  # first call imports what it watches; the armed one then sees settled modules
    guard.arm()
    try:
        side.failure = _run(
            guard,
            side,
            kernel_path,
            target,
            scratch_dir,
            input_specs,
            output_specs,
            timed_sets,
            reference_flops,
            io_bytes,
            measure_interpret,
            warmups,
            warmup_min_time_s,
            trace_dir,
            top,
            MeshSpec.model_validate(mesh) if mesh else None,
            estimate_only,
            input_values,
            absent_inputs,
        )
    finally:
        changed = timed_loop.changed(before, timed_loop.clock_fingerprints())
        tampered, reached = guard.check()
        if changed:
            side.tampered.append(f"changed the timing loop's {', '.join(changed)}")
        side.tampered += [tampered] if tampered else []
        side.reached = reached
    return side.model_dump(mode="json")


def _llo_estimate(cand, tgt, base_shapes, mesh_spec, calls, chip, reference_flops, values, side):
    """The candidate compiled for the TPU target with the dump on, costed as `estimate` costs it (llo);
    None where the dump is off or the compile fails (the model-tier estimate then stands, with a warning)."""
    from maxkernel.tpu_tools.cost.analyze import estimate_one
    from maxkernel.tpu_tools.cost.llo_dump import active_dump

    dump = active_dump()
    if dump is None:
        return None
    args, scope = aot_args(tgt, base_shapes, mesh_spec)
    if mesh_spec is None:
        scope = trace_as_target(tgt)  # one chip: traced as the target, as compile traces it
    with scope:
        est, _, facts = estimate_one(
            cand.workload, list(args), calls, chip, dump, reference_flops, input_values=values
        )
    if est is None or "error" in facts:
        side.warnings.append(
            "static estimate at the model tier: the compile for the LLO dump failed: "
            + str(facts.get("error", "no estimate")).splitlines()[0][:200]
        )
        return None
    return est


def _run(
    guard,
    side,
    kernel_path,
    target,
    scratch_dir,
    input_specs,
    output_specs,
    timed_sets,
    reference_flops,
    io_bytes,
    measure_interpret,
    warmups,
    warmup_min_time_s,
    trace_dir,
    top,
    mesh_spec=None,
    estimate_only=None,
    input_values=None,
    absent_inputs=None,
) -> Failure | None:
    import jax

    from maxkernel.tpu_tools.cost.program_estimate import estimate_program, xla_program_cost
    from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of
    from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
    from maxkernel.tpu_tools.hardware.chips import chip_for_device_kind
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.judged.candidate import load_candidate
    from maxkernel.tpu_tools.pool.workers import report_progress
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    def pause():
        return _guard_paused(guard)

    in_specs = [ArraySpec.model_validate(s) for s in input_specs]
    out_specs = [ArraySpec.model_validate(s) for s in output_specs]
    _describe_device(side)
    warm = (
        []
        if estimate_only
        else [
            tuple(handover.as_jax(handover.load_arrays(scratch_dir, f"warmup_{i}", expect=in_specs)))
            for i in range(WARMUP_SETS)
        ]
    )
    try:
        tgt = parse_target(target)
        cand = load_candidate(kernel_path, absent_inputs)
    except (UsageError, CandidateLoadError) as e:
        return load_failure(e)
    side.kernel_sha256 = cand.sha256
    path = Path(cand.path)
    plan = execution.plan_for(tgt)
    side.execution = plan.description
    device = jax.devices()[0]

    report_progress("trace candidate")
    shapes = [jax.ShapeDtypeStruct(tuple(s.shape), jax.numpy.dtype(s.dtype)) for s in in_specs]
    aot_tpu = tgt.kind == "tpu" and not plan.native
    base_shapes = list(shapes)
    if mesh_spec is not None and not plan.native:
        if not aot_tpu:
            return Failure(
                kind="usage_error",
                summary=f"a kernel over a mesh ({mesh_spec.describe()}) is profiled for a TPU target",
                stage="load",
            )
        measure_interpret = False  # its shard_map needs N devices; this process has one
        side.warnings.append(
            f"over a mesh {mesh_spec.describe()}: estimated per chip on the {tgt.name} topology, not run here"
        )
    try:
        if aot_tpu and mesh_spec is not None:
            shapes, scope = aot_args(tgt, shapes, mesh_spec)
        else:
            scope = trace_as_target(tgt) if aot_tpu else contextlib.nullcontext()  # as compile traces
        with scope:
            jaxpr = jax.make_jaxpr(cand.workload)(*shapes)
    except Exception as e:
        return classify_exception(e, "trace", path)
    calls = find_pallas_calls(jaxpr)
    side.has_pallas_call = bool(calls)
    got, want = _specs(jaxpr.out_avals), [(tuple(s.shape), s.dtype) for s in out_specs]
    if got != want:
        fmt = lambda specs: ", ".join(f"{d}{list(s)}" for s, d in specs)  # noqa: E731
        return Failure(
            kind="shape_mismatch",
            summary=f"output {fmt(got)} differs from the reference's {fmt(want)}",
            stage="trace",
        )
    if calls and tgt.kind == "tpu" and (over := body_refusal(jaxpr, tgt.name)) is not None:
        return over  # the same pre-compile verdict as compile and estimate: on a chip, no native compile
    if not calls and not plan.native:
        side.execution = f"plain JAX (no pallas_call): runs natively on {device.platform}; {plan.description}"

    native = plan.native or (not calls and mesh_spec is None)
    local_chip = chip_for_device_kind(device.device_kind) if device.platform == "tpu" else None
    est_chip = tgt.chip or local_chip
    with contextlib.ExitStack() as interp:  # the interpreter's state lives inside this scope
        if not native and measure_interpret:
            interp.enter_context(execution.tpu_interpret_mode())
        fn = None
        if estimate_only:
            side.not_measured_reason = estimate_only
            if mesh_spec is not None and not plan.native:  # the size is not all: at a check size neither
                side.not_measured_reason += (
                    f"; at any size, a kernel over a mesh ({mesh_spec.describe()}) runs only on a TPU slice "
                    "of that many chips (here it is estimated per chip)"
                )
        elif native or measure_interpret:
            report_progress("compile candidate")
            stage = "lower"
            try:
                lowered = jax.jit(_named(cand.workload, "candidate")).lower(*warm[0])
                stage = "compile"
                compiled = lowered.compile()
                stage = "run"
                jax.block_until_ready(compiled(*warm[0]))
            except Exception as e:
                return classify_exception(e, stage, path)
            if native:
                side.xla_flops = cost_analysis_of(compiled).get("flops")
            fn = _named(compiled, "candidate")
            side.candidate_execution = "native" if native else "interpret"
        else:
            side.not_measured_reason = (
                f"not measured: target chip absent (Pallas kernel runs in interpret mode on {device.platform.upper()}); "
                "pass measure_interpret to time it anyway (not representative)"
            )
            if mesh_spec is not None:
                side.not_measured_reason = (
                    f"not measured: a kernel over a mesh ({mesh_spec.describe()}) runs only on a TPU slice "
                    "of that many chips; here it is estimated per chip"
                )
        calls = _distrust_cost_estimates(calls, reference_flops, side)

        def estimate() -> None:  # after the timings: costing the whole program must not disturb them
            if est_chip is None:
                return
            try:
                values = _values(in_specs, warm, input_values) if calls else None
                if calls and aot_tpu:
                    side.static_estimate = _llo_estimate(
                        cand, tgt, base_shapes, mesh_spec, calls, est_chip, reference_flops, values, side
                    )
                    if side.static_estimate is not None:
                        return
                cost, fusions = (
                    xla_program_cost(cand.workload, base_shapes, tgt, mesh_spec)
                    if not calls and tgt.kind == "tpu"
                    else ({}, None)
                )
                side.static_estimate = estimate_program(
                    jaxpr,
                    calls,
                    est_chip,
                    input_values=values,
                    reference_flops=reference_flops,
                    xla_flops=side.xla_flops,
                    io_bytes=io_bytes,
                    xla_tpu_cost=cost or None,
                    xla_fusions=fusions,
                )
            except Exception as e:
                side.warnings.append(f"no static estimate: {type(e).__name__}: {e}")

        if fn is None:
            estimate()
            return None
        try:
            warm_up(fn, warm, warmups, warmup_min_time_s)
            _timed_with_device(fn, "jit_candidate", scratch_dir, timed_sets, in_specs, side, pause)
        except timed_loop.DeliveryTimeout as e:
            return Failure(kind="internal_error", summary=str(e), stage="run")
        except Exception as e:
            return classify_exception(e, "run", path)
        if native:
            capture_trace(fn, warm, trace_dir, top, side, pause=pause)
        estimate()
    return None
