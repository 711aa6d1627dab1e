"""The estimate and analyze jobs: the candidate traced and compiled for a TPU target in a judged child.

They never see the reference: its shapes, its MESH and its flops arrive as the reference child's
`ReferenceSide`, as compile's do. The candidate's Python runs under the integrity guard, so a kernel
that rewrites the estimator (or reaches the reference's path) is `tampered`, not a fast estimate.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from maxkernel.tpu_tools.cost.analyze import AnalysisReport, _limit_to_fit, _program, estimate_one, summarize
from maxkernel.tpu_tools.cost.estimate import default_scoped_vmem_bytes
from maxkernel.tpu_tools.hardware.targets import estimate_chip
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.reports import Failure, ReferenceSide


def _shapes_of(side: ReferenceSide) -> tuple:
    import jax

    return tuple(jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in side.input_specs)


def _values_of(side: ReferenceSide) -> list | None:
    """Per input, its values where the reference gave them (small integer tables), else None."""
    if not side.input_values:
        return None
    import numpy as np

    return [
        np.asarray(side.input_values[i], dtype=s.dtype) if i in side.input_values else None
        for i, s in enumerate(side.input_specs)
    ]


def _hidden(side: ReferenceSide, kernel_path: str) -> list[str]:
    """The reference's path, hidden from the candidate, unless the candidate is that very file: estimating
    the reference itself (the XLA baseline) reads nothing it does not already hold."""
    if side.reference is None:
        return []
    ref = os.path.realpath(side.reference.path)
    return [] if os.path.realpath(kernel_path) == ref else [ref]


def analyze_job(kernel_path: str, reference_side: dict, target: str = "tpu-v5e", size: str = "small") -> dict:
    """Pool job: an AnalysisReport as a JSON-able dict (the candidate's Python runs under the guard)."""
    from maxkernel.tpu_tools.judged import job_env
    from maxkernel.tpu_tools.judged.integrity import ESTIMATOR_MODULES, Guard

    job_env.scrub()
    side = ReferenceSide.model_validate(reference_side)
    guard = Guard(_hidden(side, kernel_path), extra_modules=ESTIMATOR_MODULES)
    report = run_analyze(kernel_path, side, target, size, guard=guard)
    if guard.before:  # armed: the candidate was imported
        changed, reached = guard.check()
        if changed or reached:
            report.ok, report.estimate = False, None
            report.failure = Failure(
                kind="tampered", summary=f"the candidate tampered with the judge: {changed or reached}"[:1000]
            )
    return report.model_dump(mode="json")


def run_analyze(
    kernel_path: str, side: ReferenceSide, target_name: str, size: str, guard=None
) -> AnalysisReport:
    from maxkernel.tpu_tools.cost.llo_dump import enable_dump

    dump_root = enable_dump()  # before anything touches the TPU backend
    import jax

    from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
    from maxkernel.tpu_tools.hardware import mesh
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.judged.candidate import load_candidate
    from maxkernel.tpu_tools.judged.classify import load_failure
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    report = AnalysisReport(ok=False, tier="model", kernel_path=kernel_path, target=target_name, size=size)
    try:
        target = parse_target(target_name)
        if target.kind != "tpu" or target.chip is None:
            raise UsageError(f"analyze needs a TPU target (tpu-v5e, tpu-v6e, ...), got {target_name!r}")
        in_shapes = _shapes_of(side)
        if guard is not None:
            guard.arm()  # just before the candidate's code first runs
        cand = load_candidate(kernel_path, side.absent_inputs)
    except (UsageError, CandidateLoadError) as e:
        report.failure = load_failure(e)
        return report
    report.kernel_sha256 = cand.sha256
    chip = target.chip
    report.vmem_capacity_bytes = chip.vmem_bytes
    try:
        spec = side.reference.mesh if side.reference else None
        args, scope = mesh.aot_args(target, in_shapes, spec)
        # one chip: traced as the target, as compile traces it (the default device is the chip's too)
        with scope, trace_as_target(target) if spec is None else contextlib.nullcontext():
            traced = jax.jit(cand.workload).trace(*args)
            calls = find_pallas_calls(traced.jaxpr)
            t0 = time.perf_counter()
            est, programs, facts = estimate_one(
                cand.workload,
                args,
                calls,
                chip,
                dump_root,
                side.flops,
                traced=traced,
                input_values=_values_of(side),
            )
    except Exception as e:
        report.failure = Failure(kind="python_error", summary=f"trace failed: {type(e).__name__}: {e}"[:300])
        return report
    report.compile_ms = round(facts.get("compile_ms", (time.perf_counter() - t0) * 1e3), 1)
    report.analysis_ms = round(facts.get("parse_ms", 0.0), 1)
    limits = [c.vmem_limit_bytes for c in calls if c.vmem_limit_bytes]
    report.vmem_scoped_limit_bytes = max(limits) if limits else default_scoped_vmem_bytes(chip)
    report.kernels = [_program(p) for p in programs if p.is_kernel]
    report.xla_programs = [_program(p) for p in programs if not p.is_kernel]
    report.estimate = est
    if "vmem_needed" in facts:
        report.vmem_needed_bytes = int(facts["vmem_needed"])
        report.vmem_scoped_limit_bytes = int(facts["vmem_limit"])
        report.vmem_limit_to_fit_bytes = _limit_to_fit(report.vmem_needed_bytes, chip.vmem_bytes)
    if programs:
        report.tier, report.tier_note = "llo", f"read from libtpu's LLO dump ({len(programs)} programs)"
    else:
        report.tier_note = "no LLO dump: " + (facts.get("error", "").splitlines()[0][:200] or "none written")
    if "vmem_needed" in facts:
        fit = report.vmem_limit_to_fit_bytes
        report.failure = Failure(
            kind="vmem_exhausted",
            summary=(
                facts["error"][:300]
                if facts.get("not_compiled")
                else f"needs {report.vmem_needed_bytes} B of VMEM, over the {report.vmem_scoped_limit_bytes} B "
                "scoped limit"
                + (f": vmem_limit_bytes={fit} would fit" if fit else ": more than the chip's VMEM")
            ),
            message=facts["error"],
            stage="trace" if facts.get("not_compiled") else "compile",
            requested_bytes=report.vmem_needed_bytes,
            capacity_bytes=report.vmem_scoped_limit_bytes,
        )
    elif "error" in facts:
        report.failure = Failure(
            kind="compile_error",
            summary=facts["error"].splitlines()[0][:300],
            message=facts["error"],
            stage="trace" if facts.get("not_compiled") else "compile",
        )
    report.ok = report.failure is None
    report.summary = summarize(report)
    return report


def _estimate_one(
    kernel_path: str,
    flops: float | None,
    shapes: tuple,
    chip: str,
    dump_root=None,
    allow_plain: bool = False,
    input_values: list | None = None,
    absent: list[int] | None = None,
) -> dict:
    """Trace, then compile with the LLO dump where libtpu is here (tier llo + the compiler's VMEM verdict)."""
    import jax

    from maxkernel.tpu_tools.cost.analyze import layout_problems
    from maxkernel.tpu_tools.judged.candidate import load_candidate
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    try:
        cand = load_candidate(kernel_path, absent)
        traced = jax.jit(cand.workload).trace(*shapes)
        calls = find_pallas_calls(traced.jaxpr)
    except Exception as e:  # the candidate's own failure: data for the sweep
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    if not calls and not allow_plain:
        return {"ok": False, "error": "no pallas_call in the rendered kernel"}
    try:
        est, _, facts = estimate_one(
            cand.workload,
            list(shapes),
            calls,
            chip,
            dump_root,
            flops,
            traced=traced,
            input_values=input_values,
        )
    except Exception as e:
        return {"ok": False, "error": f"estimate failed: {type(e).__name__}: {e}"[:2000]}
    assert est is not None
    if "error" in facts:
        # The target's compiler rejected it: a failed estimate with the compiler's message, never a time.
        out = {
            "ok": False,
            "error": (
                f"not compiled for {est.chip}: {facts['error']}"
                if facts.get("not_compiled")
                else f"the {est.chip} compiler rejected it: {facts['error']}"
            )[:4000],
            "compile_error": facts["error"],
            "vmem_capacity_bytes": est.vmem_capacity_bytes,
            "layout_problems": layout_problems(calls),
        }
        if "vmem_needed" in facts:
            out["compiler_vmem_bytes"], out["compiler_vmem_limit"] = facts["vmem_needed"], facts["vmem_limit"]
        if facts.get("not_compiled"):
            out["not_compiled"] = True
        return out
    out = {"ok": True, "estimate": est.model_dump(mode="json"), "layout_problems": layout_problems(calls)}
    out["compiled"] = "compile_ms" in facts  # the compiler accepted it: its VMEM verdict stands
    return out


def _aot_shapes(target: str, shapes: tuple, mesh_spec=None) -> tuple[tuple, Any, Any]:
    """(shapes on the target's compile-only devices, trace scope, dump root) or the plain shapes.

    A reference with a MESH is traced over its N-chip topology (mesh.aot_args)."""
    from maxkernel.tpu_tools.cost.llo_dump import enable_dump

    dump_root = enable_dump()  # before anything touches the TPU backend
    try:
        from maxkernel.tpu_tools.hardware import mesh
        from maxkernel.tpu_tools.hardware.targets import parse_target

        tgt = parse_target(target)
        if tgt.kind != "tpu":
            return shapes, contextlib.nullcontext(), None
        args, scope = mesh.aot_args(tgt, shapes, mesh_spec)
        if mesh_spec is None:  # one chip: traced as the target, as compile traces it
            scope = trace_as_target(tgt)
        return tuple(args), scope, dump_root
    except Exception:  # no libtpu here: trace-only estimates (tier model)
        return shapes, contextlib.nullcontext(), None


def estimate_job(
    kernel_path: str, reference_side: dict, target: str = "tpu-v6e", size: str = "small"
) -> dict:
    """Pool job: the StaticEstimate dict of one candidate, or {'ok': False, 'error': ...}.

    Plain JAX (no pallas_call) is estimated too, from XLA's cost analysis on the TPU target.
    """
    return estimate_batch_job([kernel_path], reference_side, target, size, allow_plain=True)["results"][0]


def estimate_batch_job(
    kernel_paths: list[str],
    reference_side: dict,
    target: str = "tpu-v6e",
    size: str = "small",
    allow_plain: bool = False,
) -> dict:
    """Pool job: estimate several candidates in one child (one jax start-up for the whole sweep)."""
    from maxkernel.tpu_tools.judged import job_env
    from maxkernel.tpu_tools.judged.integrity import ESTIMATOR_MODULES, Guard
    from maxkernel.tpu_tools.pool.workers import report_progress

    job_env.scrub()
    side = ReferenceSide.model_validate(reference_side)
    mesh_spec = side.reference.mesh if side.reference else None
    shapes, scope, dump_root = _aot_shapes(target, _shapes_of(side), mesh_spec)
    chip = estimate_chip(target)
    results = []
    # The candidates run their Python here: each is estimated under the integrity guard, and once one has
    # changed the estimator (or the clocks, jax.jit ...) nothing after it in this process is trusted.
    guard = Guard([], extra_modules=ESTIMATOR_MODULES)
    tampered: str | None = None
    with scope:
        for i, path in enumerate(kernel_paths):
            report_progress(f"estimate {i + 1}/{len(kernel_paths)}")
            if tampered is not None:
                results.append(
                    {"ok": False, "error": f"tampered: not estimated after an earlier candidate {tampered}"}
                )
                continue
            guard.hidden = _hidden(side, path)  # per candidate: one of them may be the reference itself
            guard.arm()
            try:
                result = _estimate_one(
                    path,
                    side.flops,
                    shapes,
                    chip,
                    dump_root,
                    allow_plain,
                    _values_of(side),
                    side.absent_inputs,
                )
            finally:
                changed, reached = guard.check()
            if changed or reached:
                tampered = f"tampered with the judge: {changed or reached}"
                result = {"ok": False, "error": f"tampered: the candidate {tampered[:600]}"}
            results.append(result)
    return {"chip": chip, "results": results}
