"""The reference's side of `profile` (pool jobs): build every input set, time the reference. Never runs candidate code.

`build_and_time_job` (the first reference process) loads the reference, builds the warm-up sets and
the timed sets from seeds the parent drew (so nobody can predict them), writes them to the parent's
private staging folder, then times the reference on the timed sets with the same loop the candidate
will get (timed_loop.py). Its timed outputs are the expected outputs the parent checks against.
`time_job` (the second reference process, after the candidate) times the reference again on the same
sets: the two reference processes give a noise floor that includes process-to-process variation.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from pydantic import Field

from maxkernel.tpu_tools.cost.estimate import StaticEstimate
from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.judged import timed_loop
from maxkernel.tpu_tools.judged.timed_loop import (
    WARMUP_SETS,
    TimedSide,
    _describe_device,
    _named,
    _timed_with_device,
    capture_trace,
    warm_up,
)
from maxkernel.tpu_tools.pool import handover
from maxkernel.tpu_tools.pool.child import report_progress
from maxkernel.tpu_tools.problem.memory import TooBig, guard_reference
from maxkernel.tpu_tools.problem.reference import load_reference
from maxkernel.tpu_tools.problem.source import ReferenceInfo
from maxkernel.tpu_tools.reports import ArraySpec

TIMED_SETS_BUDGET_BYTES = 512 << 20  # the timed input sets, all together (the judge holds them in memory)
MIN_TIMED_SETS = 3
SPECS_FILE = "input_specs.json"


class ReferenceSide(TimedSide):
    """The first reference process: the sets it built and what it knows about the reference's work."""

    info: ReferenceInfo | None = None
    absent_inputs: list[int] = Field(
        default_factory=list, description="None inputs left out (reports.ReferenceSide)"
    )
    error: str | None = Field(default=None, description="why the reference could not be profiled")
    error_is_usage: bool = False
    input_specs: list[ArraySpec] = []
    output_specs: list[ArraySpec] = []
    timed_sets: int = 0
    set_bytes: int = 0
    flops: float | None = None
    flops_source: str = "unknown"
    xla_bytes_accessed: float | None = None
    static_estimate: StaticEstimate | None = Field(
        default=None,
        description="the reference's own program on the target chip, costed as the candidate's is",
    )
    estimate_only: str | None = Field(
        default=None,
        description="why nothing is timed: the TPU target's chip is absent and the size is not a check size",
    )
    input_values: dict[int, Any] = Field(
        default_factory=dict,
        description="estimate only: its small integer inputs' values by position (data-dependent work)",
    )


def _nbytes(arrays) -> int:
    return int(sum(a.size * a.dtype.itemsize for a in arrays))


def build_and_time_job(
    reference: str,
    size: str,
    warmup_seeds: list[int],
    timed_seeds: list[int],
    staging_dir: str,
    scratch_dir: str,
    warmups: int = 3,
    warmup_min_time_s: float = 0.25,
    trace_dir: str | None = None,
    top: int = 15,
    target: str | None = None,
) -> dict:
    """Pool job: build the sets into staging_dir, time the reference on sets delivered into scratch_dir.

    With a TPU `target`, it also estimates the reference's own program there (after the timings): the
    baseline a candidate's estimate is compared with, from the same estimator.
    """
    import jax

    from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of
    from maxkernel.tpu_tools.judged import job_env

    job_env.scrub()
    if target is not None:  # before the backend starts: XLA's program is costed from its schedule (llo)
        from maxkernel.tpu_tools.cost.llo_dump import enable_dump_for

        enable_dump_for(target)
    side = ReferenceSide()
    report_progress("reference: load")
    _describe_device(side)
    try:
        ref = load_reference(reference)
    except UsageError as e:
        side.error, side.error_is_usage = str(e), True
        return side.model_dump(mode="json")
    side.info = ref.info
    if target is not None and (why := _estimate_only(ref, size, target)) is not None:
        report_progress("reference: estimate only")
        return _estimate_side(ref, size, target, side, why).model_dump(mode="json")
    if not ref.info.seedable:
        side.warnings.append(
            "the reference is not seedable: every input set is the same, so memoization cannot be excluded"
        )
    try:
        guard_reference(ref, size)
    except TooBig as e:
        side.error, side.error_is_usage = str(e), True
        return side.model_dump(mode="json")
    staging = Path(staging_dir)
    report_progress("reference: build inputs")
    try:
        warm = [ref.create_inputs(size, s) for s in warmup_seeds[:WARMUP_SETS]]
        first = timed_loop.to_numpy(warm[0])
        side.input_specs = handover.specs_of(first)
        side.absent_inputs = list(ref.absent_inputs)
        side.set_bytes = _nbytes(first)
        if len(first) != len(jax.tree_util.tree_leaves(warm[0])) or len(first) != len(warm[0]):
            raise UsageError("profile needs a flat tuple of arrays as the reference's inputs")
        budget = max(MIN_TIMED_SETS, TIMED_SETS_BUDGET_BYTES // max(side.set_bytes, 1))
        n = min(len(timed_seeds), budget)
        if n < len(timed_seeds):
            side.warnings.append(
                f"{n} fresh timed sets, not {len(timed_seeds)}: {side.set_bytes / 2**20:.1f} MiB each, "
                f"{TIMED_SETS_BUDGET_BYTES >> 20} MiB budget"
            )
        handover.save_specs(staging / SPECS_FILE, side.input_specs)
        for i, args in enumerate(warm):
            handover.save_arrays(staging, f"warmup_{i}", timed_loop.to_numpy(args))
        for i, seed in enumerate(timed_seeds[:n]):
            folder = staging / f"set_{i}"
            folder.mkdir()
            handover.save_arrays(
                folder, timed_loop.INPUTS, timed_loop.to_numpy(ref.create_inputs(size, seed))
            )
        side.timed_sets = n
        side.output_specs = handover.specs_of(
            jax.tree_util.tree_leaves(jax.eval_shape(ref.workload, *warm[0]))
        )
    except UsageError as e:
        side.error, side.error_is_usage = str(e), True
        return side.model_dump(mode="json")
    except Exception as e:
        side.error = f"the reference failed to build its inputs: {type(e).__name__}: {e}"
        return side.model_dump(mode="json")
    report_progress("reference: compile")
    try:
        compiled = jax.jit(_named(ref.workload, "reference")).lower(*warm[0]).compile()
    except Exception as e:
        side.error = f"the reference failed to compile: {type(e).__name__}: {str(e)[:500]}"
        return side.model_dump(mode="json")
    cost = cost_analysis_of(compiled)
    side.xla_bytes_accessed = cost.get("bytes accessed")
    try:
        side.flops, side.flops_source = ref.get_flops(size), "get_flops"
    except Exception:
        side.flops = None
    if side.flops is None:
        side.flops, side.flops_source = cost.get("flops"), "XLA cost analysis of the reference"
        if side.flops is None:
            side.flops_source = "unknown"
    fn = _named(compiled, "reference")
    report_progress("reference: warm up")
    warm_up(fn, warm, warmups, warmup_min_time_s)
    _timed_with_device(fn, "jit_reference", scratch_dir, n, side.input_specs, side)
    report_progress("reference: trace")
    capture_trace(fn, warm, trace_dir, top, side)
    if target is not None:
        report_progress("reference: estimate")
        _estimate_reference(ref, warm[0], target, side, cost.get("flops"))
    return side.model_dump(mode="json")


def _estimate_only(ref, size: str, target: str) -> str | None:
    """Why this profile only estimates, or None: off the TPU target's chip, timing means running on CPU
    (the reference natively, a Pallas kernel in interpret mode), which at a size that is not a check size
    (the production size) takes minutes per call and says nothing about the chip."""
    from maxkernel.tpu_tools.hardware import execution
    from maxkernel.tpu_tools.hardware.targets import parse_target

    tgt = parse_target(target)
    if tgt.kind != "tpu" or execution.plan_for(tgt).native:
        return None
    checks, _ = ref.default_check_sizes()
    if size in checks:
        return None
    return (
        f"nothing measured: {tgt.chip.name if tgt.chip else tgt.name} is absent here, and size {size!r} is not a "
        f"check size ({', '.join(checks)}): timing it would run it on CPU (minutes per call, nothing about "
        "the chip); the static estimates of the candidate and the reference stand in, labeled with their tier"
    )


def _estimate_side(ref, size: str, target: str, side: ReferenceSide, why: str) -> ReferenceSide:
    """The reference on abstract shapes only: specs, flops, its static estimate; no array is built or timed."""
    import jax

    from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of

    side.estimate_only = why
    try:
        shapes = list(jax.tree_util.tree_leaves(ref.input_shapes(size)))
        side.input_specs = [ArraySpec(shape=list(x.shape), dtype=str(x.dtype)) for x in shapes]
        side.absent_inputs = list(ref.absent_inputs)
        outs = jax.tree_util.tree_leaves(jax.eval_shape(ref.workload, *shapes))
        side.output_specs = [ArraySpec(shape=list(x.shape), dtype=str(x.dtype)) for x in outs]
        side.set_bytes = int(sum(_spec_bytes(s) for s in side.input_specs))
    except UsageError as e:
        side.error, side.error_is_usage = str(e), True
        return side
    except Exception as e:
        side.error = f"the reference failed to give its shapes: {type(e).__name__}: {e}"
        return side
    xla_flops = None
    try:  # a compile on abstract shapes (never executed): XLA's count where get_flops has none
        if not ref.pallas:  # a Pallas baseline's flops come from its kernels' estimate
            xla_flops = cost_analysis_of(jax.jit(ref.workload).lower(*shapes).compile()).get("flops")
    except Exception as e:
        side.warnings.append(f"no XLA cost analysis of the reference: {type(e).__name__}: {str(e)[:200]}")
    try:
        side.flops, side.flops_source = ref.get_flops(size), "get_flops"
    except Exception:
        side.flops = None
    if side.flops is None:
        side.flops, side.flops_source = xla_flops, "XLA cost analysis of the reference"
        if side.flops is None:
            side.flops_source = "unknown"
    report_progress("reference: estimate")
    _estimate_reference(ref, shapes, target, side, xla_flops)
    from maxkernel.tpu_tools.cost.data_work import small_int_inputs

    try:  # the tables that decide a kernel's data-dependent work (seed 0; the large inputs are never made)
        side.input_values = small_int_inputs(lambda: ref.create_inputs(size, 0), shapes)
    except Exception as e:
        side.warnings.append(f"no input values for the estimate: {type(e).__name__}: {str(e)[:200]}")
    return side


def _spec_bytes(spec: ArraySpec) -> int:
    import math

    import jax.numpy as jnp

    return math.prod(spec.shape) * jnp.dtype(spec.dtype).itemsize


def _estimate_reference(ref, args, target: str, side: ReferenceSide, xla_flops: float | None) -> None:
    """The reference's program costed for the target chip exactly as profile_candidate costs a candidate."""
    import jax
    import numpy as np

    from maxkernel.tpu_tools.cost.program_estimate import estimate_program, xla_program_cost
    from maxkernel.tpu_tools.hardware import execution
    from maxkernel.tpu_tools.hardware.chips import chip_for_device_kind
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    try:
        tgt = parse_target(target)
        device = jax.devices()[0]
        chip = tgt.chip or (chip_for_device_kind(device.device_kind) if device.platform == "tpu" else None)
        if chip is None:
            return
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
        if ref.pallas and tgt.kind == "tpu" and ref.info.mesh is None:
            _estimate_pallas_reference(ref, shapes, tgt, side)
            return
        aot_tpu = tgt.kind == "tpu" and not execution.plan_for(tgt).native
        with execution.abstract_tpu_mesh(tgt) if aot_tpu else contextlib.nullcontext():
            jaxpr = jax.make_jaxpr(ref.workload)(*shapes)
        out_bytes = sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in jaxpr.out_avals)
        # Over a MESH the baseline is XLA's program on N chips: one chip's share of the work and bytes
        # (its collectives are not costed, so the baseline is, if anything, too fast).
        mesh = ref.info.mesh
        share = mesh.share if mesh else (lambda x: x)  # noqa: E731
        calls = find_pallas_calls(jaxpr)
        # XLA's own HBM traffic for the program compiled for the chip (per chip over a mesh), fusion by fusion
        why: list[str] = []
        tpu, fusions = (
            xla_program_cost(ref.workload, shapes, tgt, ref.info.mesh, why)
            if not calls and tgt.kind == "tpu"
            else ({}, None)
        )
        side.static_estimate = estimate_program(
            jaxpr,
            calls,
            chip,
            reference_flops=share(side.flops),
            xla_flops=share(xla_flops),
            io_bytes=share(side.set_bytes + out_bytes),
            xla_tpu_cost=tpu or None,
            xla_fusions=fusions,
        )
        if why:
            said = (
                f"XLA's own program does not compile for {tgt.name} at these shapes ({why[0]}): the figure is "
                "the roofline of its flops and bytes, not a program that runs there"
            )
            side.static_estimate.tier_note += f"; {said}"
            side.warnings.append(said)
        if mesh and mesh.device_count > 1:
            side.static_estimate.assumptions.append(
                f"XLA baseline over {mesh.device_count} chips: 1/{mesh.device_count} of the global work and "
                "bytes per chip, collectives not costed"
            )
    except Exception as e:
        side.warnings.append(f"no static estimate of the reference: {type(e).__name__}: {e}")


def _estimate_pallas_reference(ref, shapes: list, tgt, side: ReferenceSide) -> None:
    """A Pallas reference (a baseline) is a kernel: costed exactly as a candidate kernel is (cost/analyze.py's
    estimate_one: traced as the target, compiled with the LLO dump where libtpu is here), so a candidate and
    its baseline stand on the same tier; a baseline the compiler rejects gets no figure, and says why."""
    import jax

    from maxkernel.tpu_tools.cost.analyze import estimate_one
    from maxkernel.tpu_tools.cost.llo_dump import active_dump
    from maxkernel.tpu_tools.hardware import execution
    from maxkernel.tpu_tools.hardware.chip_trace import trace_as_target
    from maxkernel.tpu_tools.hardware.targets import estimate_chip
    from maxkernel.tpu_tools.problem import chip_program
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    with chip_program.reference_target(tgt.name), trace_as_target(tgt):
        aot = [jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=execution.aot_sharding(tgt)) for s in shapes]
        traced = jax.jit(ref.workload).trace(*aot)
        calls = find_pallas_calls(traced.jaxpr)
        est, _, facts = estimate_one(
            ref.workload, aot, calls, estimate_chip(tgt.name), active_dump(), side.flops, traced=traced
        )
    if est is None or "error" in facts:
        side.warnings.append(f"no static estimate of the baseline: {facts.get('error', 'none made')}"[:600])
        return
    est.assumptions.append("the reference is a Pallas kernel (a baseline): costed as a candidate kernel is")
    side.static_estimate = est


def time_job(
    reference: str,
    size: str,
    scratch_dir: str,
    timed_sets: int,
    warmups: int = 3,
    warmup_min_time_s: float = 0.25,
) -> dict:
    """Pool job: the reference timed again, in a fresh process, on the same sets (the noise floor's half)."""
    import jax

    from maxkernel.tpu_tools.judged import job_env

    job_env.scrub()
    side = TimedSide()
    _describe_device(side)
    ref = load_reference(reference)
    specs = handover.load_specs(Path(scratch_dir) / SPECS_FILE)
    warm = [
        tuple(handover.as_jax(handover.load_arrays(scratch_dir, f"warmup_{i}", expect=specs)))
        for i in range(WARMUP_SETS)
    ]
    fn = _named(jax.jit(_named(ref.workload, "reference")).lower(*warm[0]).compile(), "reference")
    warm_up(fn, warm, warmups, warmup_min_time_s)
    _timed_with_device(fn, "jit_reference", scratch_dir, timed_sets, specs, side)
    return side.model_dump(mode="json")
