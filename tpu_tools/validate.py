"""Validation in two isolated children: the candidate never shares a process with the reference's outputs.

1. `candidate_outputs_job` imports the candidate, builds each seed's inputs, runs it (TPU interpret mode with
   race detection when the target chip is absent) and saves the outputs to .npz files.
2. `reference_compare_job` imports only the reference, recomputes the outputs and compares them.

With an extra input case both children build the inputs from the same (size, seed, case). A case the
reference itself cannot build, trace or run (or answers with NaN/inf) ends as `case_unusable`: a
verdict on the case, never on the kernel.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

import numpy as np

from maxkernel.tpu_tools import execution
from maxkernel.tpu_tools.classify import classify_exception
from maxkernel.tpu_tools.compare import compare_outputs, trivial_outputs_passing
from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
from maxkernel.tpu_tools.input_cases import InputCase
from maxkernel.tpu_tools.problem import load_candidate, load_reference
from maxkernel.tpu_tools.reports import Failure, ValidationReport
from maxkernel.tpu_tools.targets import parse_target
from maxkernel.tpu_tools.tolerances import choose_tolerance


def _to_numpy(tree) -> list[np.ndarray]:
    import jax

    out = []
    for leaf in jax.tree_util.tree_leaves(tree):
        arr = np.asarray(leaf)
        out.append(arr.astype(np.float32) if arr.dtype.kind == "V" or "bfloat16" in str(arr.dtype) else arr)
    return out


def _dtypes(tree) -> list[str]:
    import jax

    return [str(x.dtype) for x in jax.tree_util.tree_leaves(tree)]


def _case_failure(case: InputCase, why: str) -> Failure:
    return Failure(
        kind="case_unusable",
        summary=f"{case.describe()} is unusable, not a verdict on the kernel: {why}"[:1000],
        stage="load",
    )


def _check_case(ref, size: str, case: InputCase) -> Failure | None:
    """The reference must build and trace the case before the candidate is blamed for anything."""
    import jax

    try:
        shapes = ref.input_shapes(size, case)
        jax.eval_shape(ref.workload, *shapes)
    except Exception as e:
        return _case_failure(case, f"the reference cannot build or trace it: {type(e).__name__}: {e}")
    return None


def candidate_outputs_job(
    kernel_path: str,
    reference: str,
    target: str,
    size: str,
    seeds: list[int],
    out_dir: str,
    allow_plain_jax: bool = False,
    case: dict | None = None,
) -> dict:
    """Pool job (candidate side). Returns a partial ValidationReport; outputs go to out_dir/seed_<n>.npz."""
    import jax

    from maxkernel.tpu_tools.compile import pallas_calls_of
    from maxkernel.tpu_tools.env_info import environment
    from maxkernel.tpu_tools.pool import report_progress

    input_case = InputCase.model_validate(case) if case is not None else None
    report = ValidationReport(
        ok=False, target=target, size=size, kernel_path=kernel_path, seeds=seeds, case=input_case
    )
    report.environment = environment()
    try:
        tgt = parse_target(target)
        ref = load_reference(reference)
        report.reference = ref.info
        cand = load_candidate(kernel_path)
    except UsageError as e:
        report.failure = Failure(kind="usage_error", summary=str(e), stage="load")
        return report.model_dump(mode="json")
    except CandidateLoadError as e:
        report.failure = Failure(
            kind="load_error", summary=str(e), message=e.detail, stage="load", line=e.line
        )
        return report.model_dump(mode="json")
    report.kernel_sha256 = cand.sha256
    if input_case is not None and (bad := _check_case(ref, size, input_case)) is not None:
        report.failure = bad
        return report.model_dump(mode="json")
    plan = execution.plan_for(tgt)
    detect_races = tgt.kind == "tpu" and not plan.native
    report.execution = plan.description + (" (race detection on)" if detect_races else "")
    scope = (
        contextlib.nullcontext() if plan.native else execution.tpu_interpret_mode(detect_races=detect_races)
    )
    path = Path(cand.path)
    fn = jax.jit(cand.workload)
    race_log = io.StringIO()
    with scope:
        stage = "trace"
        try:
            shapes = ref.input_shapes(size, input_case)
            report.has_pallas_call = bool(pallas_calls_of(jax.make_jaxpr(cand.workload)(*shapes)))
        except Exception as e:
            report.failure = classify_exception(e, stage, path)
            return report.model_dump(mode="json")
        if not report.has_pallas_call and not allow_plain_jax:
            report.failure = Failure(
                kind="no_kernel",
                summary="no kernel: the candidate contains no pallas_call (pass allow_plain_jax to accept JAX rewrites)",
                stage="trace",
            )
            return report.model_dump(mode="json")
        for seed in seeds:
            report_progress(f"candidate seed {seed}")
            stage = "run"
            try:
                inputs = ref.create_inputs(size, seed, input_case)
                with contextlib.redirect_stdout(race_log):
                    out = jax.block_until_ready(fn(*inputs))
                    races = detect_races and execution.races_found()
            except Exception as e:
                report.failure = classify_exception(e, stage, path)
                return report.model_dump(mode="json")
            if races:
                report.races_found = True
                text = race_log.getvalue().strip()
                report.failure = Failure(
                    kind="race",
                    summary=f"data race detected in TPU interpret mode (seed {seed}): {text.splitlines()[1].strip() if text.count(chr(10)) else text}",
                    message=text,
                    stage="run",
                )
                return report.model_dump(mode="json")
            arrays = _to_numpy(out)
            np.savez(Path(out_dir) / f"seed_{seed}.npz", *arrays, dtypes=np.array(_dtypes(out)))
    report.ok = True  # provisional: the reference side decides
    return report.model_dump(mode="json")


def reference_compare_job(
    reference: str,
    size: str,
    seeds: list[int],
    out_dir: str,
    atol: float | None = None,
    rtol: float | None = None,
    allow_weak_check: bool = False,
    case: dict | None = None,
) -> dict:
    """Pool job (reference side): recompute the reference per seed and compare with the saved candidate outputs."""
    import jax

    from maxkernel.tpu_tools.pool import report_progress

    ref = load_reference(reference)
    input_case = InputCase.model_validate(case) if case is not None else None
    report = ValidationReport(
        ok=False, target="", size=size, kernel_path="", reference=ref.info, seeds=seeds, case=input_case
    )
    fn = jax.jit(ref.workload)
    weak_everywhere: set[str] | None = None
    for seed in seeds:
        report_progress(f"reference seed {seed}")
        if input_case is None:
            inputs = ref.create_inputs(size, seed)
            expected_tree = jax.block_until_ready(fn(*inputs))
        else:
            try:
                inputs = ref.create_inputs(size, seed, input_case)
                expected_tree = jax.block_until_ready(fn(*inputs))
            except Exception as e:  # UnusableCaseError, or the reference's own failure on these inputs
                report.failure = _case_failure(
                    input_case, f"the reference fails on it: {type(e).__name__}: {e}"
                )
                return report.model_dump(mode="json")
        expected = _to_numpy(expected_tree)
        if input_case is not None and (
            bad := sum(int((~np.isfinite(e)).sum()) for e in expected if e.dtype.kind == "f")
        ):
            report.failure = _case_failure(
                input_case,
                f"the reference answers with {bad} NaN/inf value(s) (seed {seed}): no ground truth",
            )
            return report.model_dump(mode="json")
        dtypes = _dtypes(expected_tree)
        if report.tolerance is None:
            report.tolerance = choose_tolerance(
                dtypes[0], ref_atol=ref.info.atol, ref_rtol=ref.info.rtol, atol=atol, rtol=rtol
            )
        with np.load(Path(out_dir) / f"seed_{seed}.npz") as saved:
            actual = [saved[f"arr_{i}"] for i in range(len(saved.files) - 1)]
            actual_dtypes = [str(d) for d in saved["dtypes"]]
        if [a.shape for a in actual] != [e.shape for e in expected] or actual_dtypes != dtypes:
            got = ", ".join(f"{d}{list(a.shape)}" for d, a in zip(actual_dtypes, actual, strict=False))
            want = ", ".join(f"{d}{list(e.shape)}" for d, e in zip(dtypes, expected, strict=False))
            report.failure = Failure(
                kind="shape_mismatch",
                summary=f"output {got} differs from the reference's {want}",
                stage="compare",
            )
            return report.model_dump(mode="json")
        result = compare_outputs(seed, expected, actual, report.tolerance)
        result.trivial_outputs_passing = trivial_outputs_passing(
            expected, _to_numpy(inputs), report.tolerance
        )
        weak = set(result.trivial_outputs_passing)
        weak_everywhere = weak if weak_everywhere is None else weak_everywhere & weak
        report.per_seed.append(result)
    bad = [r for r in report.per_seed if not r.ok]
    if bad:
        r = bad[0]
        report.failure = Failure(
            kind="output_mismatch",
            summary=(
                f"wrong on {len(bad)}/{len(report.per_seed)} seeds: seed {r.seed} has {r.mismatch_fraction:.2%} of elements "
                f"outside atol={report.tolerance.atol:g} rtol={report.tolerance.rtol:g}; worst at {r.worst_index}: "
                f"expected {r.worst_expected:.6g}, got {r.worst_actual:.6g} (max abs err {r.max_abs_err:.3g}"
                f"{f', {r.nan_count} NaN' if r.nan_count else ''})"
            ),
            stage="compare",
        )
    elif weak_everywhere:
        report.weak_check = True
        msg = (
            f"the check cannot tell: a trivial output ({', '.join(sorted(weak_everywhere))}) also passes "
            f"atol={report.tolerance.atol:g} rtol={report.tolerance.rtol:g} on every seed"
        )
        if allow_weak_check:
            report.warnings.append(msg)
        else:
            report.failure = Failure(
                kind="weak_check", summary=msg + " (pass allow_weak_check to accept)", stage="compare"
            )
    report.ok = report.failure is None
    return report.model_dump(mode="json")


def merge_reports(
    candidate_side: ValidationReport, reference_side: ValidationReport, started: float
) -> ValidationReport:
    """The final verdict: candidate evidence + reference comparison."""
    merged = candidate_side.model_copy(deep=True)
    merged.per_seed = reference_side.per_seed
    merged.tolerance = reference_side.tolerance
    merged.weak_check = reference_side.weak_check
    merged.warnings = candidate_side.warnings + reference_side.warnings
    merged.failure = reference_side.failure
    merged.ok = reference_side.ok
    merged.wall_time_s = round(time.perf_counter() - started, 4)
    return merged
