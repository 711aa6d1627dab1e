"""Validation across sizes, judge side: compile at the target size, then run at every check size.

The kernel is for the target size (the production shape), so it must compile there with the real
compiler for the target; interpret mode at that size is too slow off the chip, so the numbers are
checked at the check sizes (small and a derived intermediate size, problem/sizes.py). The same source
must do both: a kernel that works at one size and fails at another is `shape_specialized`, naming the
sizes, whatever the kind of failure where it broke (kept as `cause_kind`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from maxkernel.tpu_tools.judge.outcomes import interpret_limit
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.sizes import (
    UNALIGNED,
    DerivedSize,
    ShapeContract,
    SizeCheck,
    UnalignedSize,
)
from maxkernel.tpu_tools.reports import Failure, ValidationReport

ProgressFn = Callable[[str], None]

# Failures that depend on the shape the kernel met: where one size works, these at another mean the
# kernel was written for one shape. Integrity, timeout and the reference's own failures keep their
# kinds: they say something else, as does `interpret_unsupported` (jax's interpreter failed, not the kernel).
SIZE_DEPENDENT = {
    "python_error",
    "lowering_error",
    "mosaic_error",
    "vmem_exhausted",
    "smem_exhausted",
    "compile_error",
    "runtime_error",
    "shape_mismatch",
    "output_mismatch",
    "race",
    # pallas at one size, plain JAX at another: a dispatch on the shape (only after a size passed)
    "no_kernel",
    "work_outside_kernel",
}
# Out of on-chip memory at one size and not at another is the blocks outgrowing the chip, not a kernel
# written for one shape: the verdict keeps its kind (and its vmem_limit_bytes advice) and names the sizes.
MEMORY_LIMITS = {"vmem_exhausted", "smem_exhausted"}


def size_check(what: str, size: str, dims: dict[str, Any], report: Any) -> SizeCheck:
    """The record of one check at one size, from the report it produced."""
    failure = report.failure
    detail = getattr(report, "compiler_note", "") if what == "compile" else getattr(report, "execution", "")
    return SizeCheck(
        size=size,
        what=what,
        ok=bool(report.ok),
        failure_kind=failure.kind if failure else None,
        summary=failure.summary[:500] if failure else "",
        dims=dict(dims),
        detail=detail or "",
    )


def specialized(failure: Failure, passed: list[str], failed: str, worked: str) -> Failure:
    """`shape_specialized`: it `worked` (compiles / is right) at `passed`, and fails at `failed`."""
    return Failure(
        kind="shape_specialized",
        summary=(
            f"written for one shape: {worked} at {', '.join(passed)} but fails at {failed} "
            f"({failure.kind}): {failure.summary}"
        )[:1500],
        message=failure.message,
        stage=failure.stage,
        line=failure.line,
        requested_bytes=failure.requested_bytes,
        capacity_bytes=failure.capacity_bytes,
        cause_kind=failure.kind,
        sizes_passed=list(passed),
        sizes_failed=[failed],
    )


def validate_at_sizes(
    ev: Any,  # the Evaluator (judge/evaluate.py imports this module: no import back)
    kernel_path: str,
    reference: str,
    target: str,
    size: str | None,
    *,
    check_sizes: list[str] | None,
    seed_list: list[int],
    seed_offset: int | None,
    repeats: int,
    atol: float | None,
    rtol: float | None,
    allow_plain_jax: bool,
    allow_weak_check: bool,
    case: InputCase | None,
    timeout_s: float | None,
    on_progress: ProgressFn | None,
    cancel: threading.Event | None,
    caller: str = "api",
    strict_shapes: bool = False,
) -> ValidationReport:
    """`Evaluator.validate` (see there); the seeds come resolved, the same list at every size."""
    from pathlib import Path

    started = time.perf_counter()
    kernel_path = str(Path(kernel_path).expanduser().resolve())
    offset = seed_offset
    report = ValidationReport(
        ok=False,
        target=target,
        size=size or "default",
        kernel_path=kernel_path,
        seeds=seed_list,
        seed_offset=offset,
        case=case,
    )

    seen: dict[str, list[str]] = {}  # a warning's text -> the stages that gave it, said once

    def finish(failure: Failure | None = None) -> ValidationReport:
        report.failure, report.ok = failure, failure is None
        report.warnings += [f"{w} ({', '.join(where)})" for w, where in seen.items()]
        report.wall_time_s = round(time.perf_counter() - started, 4)
        return report

    def say(prefix: str) -> ProgressFn | None:
        return None if on_progress is None else (lambda m: on_progress(f"{prefix}: {m}"))

    # 1. The target size: the real compiler for the target, before anything is interpreted.
    comp = ev.compile(
        kernel_path,
        reference,
        target,
        size,
        check_sizes=check_sizes,
        resolve_checks=True,
        timeout_s=timeout_s,
        on_progress=say(f"compile at {size or 'the target size'}"),
        cancel=cancel,
    )
    report.size, report.size_note, report.reference = comp.size, comp.size_note, comp.reference
    report.kernel_sha256, report.environment = comp.kernel_sha256, comp.environment
    report.devices = comp.devices  # what it was compiled for; a run below says what it ran on
    report.check_sizes = comp.check_sizes
    report.checks = list(comp.checks)
    for w in comp.warnings:
        seen.setdefault(w, []).append(f"compile at {comp.size}")
    compiled_at = f"compiled for {target} at {comp.size!r}: {comp.compiler_note or comp.compiler}"
    if not comp.ok:
        failure = comp.failure or Failure(kind="internal_error", summary="compile failed without a failure")
        report.execution = compiled_at + "; nothing ran"
        if failure.kind not in SIZE_DEPENDENT or not comp.check_sizes:
            return finish(failure)
        passed = []
        for check in comp.check_sizes:  # compile-only at the check sizes (cheap): does it work anywhere?
            if check.name == comp.size:
                continue
            other = ev.compile(
                kernel_path,
                reference,
                target,
                check.name,
                timeout_s=timeout_s,
                on_progress=say(f"compile at {check.name}"),
                cancel=cancel,
            )
            report.checks += other.checks
            if other.ok:
                passed.append(check.name)
        if passed and failure.kind in MEMORY_LIMITS:
            where = f"compiles at {', '.join(passed)}; at {comp.size} its blocks outgrow the chip: "
            return finish(
                failure.model_copy(
                    update={
                        "summary": (where + failure.summary)[:1500],
                        "sizes_passed": passed,
                        "sizes_failed": [comp.size],
                    }
                )
            )
        if passed:
            return finish(specialized(failure, passed, comp.size, "compiles"))
        return finish(failure)

    # 2. The check sizes: interpret mode off the chip, against the reference's answers.
    names = [c.name for c in comp.check_sizes]
    if case is not None:
        names = names[:1]  # an extra case runs over the first check size
    if ev._on_device(target) and comp.size not in names:
        names.append(comp.size)  # on the chip the target size is cheap to run too
    dims = {c.name: c.dims for c in comp.check_sizes}
    passed: list[str] = []
    executions: dict[str, list[str]] = {}
    for name in names:
        run = ev.validate_at(
            kernel_path,
            reference,
            target,
            name,
            seeds=seed_list,
            repeats=repeats,
            atol=atol,
            rtol=rtol,
            allow_plain_jax=allow_plain_jax,
            allow_weak_check=allow_weak_check,
            case=case,
            timeout_s=timeout_s,
            on_progress=say(f"validate at {name}"),
            cancel=cancel,
            caller=caller,
        )
        report.checks.append(size_check("validate", name, dims.get(name, {}), run))
        for field in (
            "per_seed",
            "tolerance",
            "numerics",
            "error_summary",
            "run_order",
            "has_pallas_call",
            "work",
            "weak_check",
            "devices",
        ):
            setattr(report, field, getattr(run, field))
        report.races_found = report.races_found or run.races_found
        report.environment = run.environment or report.environment
        report.kernel_sha256 = run.kernel_sha256 or report.kernel_sha256
        for w in run.warnings:
            seen.setdefault(w, []).append(f"at {name}")
        if run.execution:
            executions.setdefault(run.execution, []).append(name)
        ran = "; ".join(f"ran at {', '.join(n)}: {e}" for e, n in executions.items())
        report.execution = f"{compiled_at}; {ran}" if ran else compiled_at
        if not run.ok:
            failure = run.failure or Failure(
                kind="internal_error", summary="validation failed without a failure"
            )
            if passed and failure.kind in SIZE_DEPENDENT:
                failure = specialized(failure, passed, name, "right")
            if failure.kind == "interpret_unsupported":  # jax's interpreter failed, not the kernel
                failure = interpret_limit(failure, target, comp.size, passed, name)
            return finish(failure)
        passed.append(name)
    # 3. The shape contract: one more run, off the alignment small and the target share (a finding)
    derived = next((c.derived for c in comp.check_sizes if c.derived is not None), None)
    unaligned = derived.unaligned if derived is not None else None
    if case is None and unaligned is not None and unaligned.ok and (check_sizes is None or strict_shapes):
        run = ev.validate_at(
            kernel_path,
            reference,
            target,
            UNALIGNED,
            seeds=seed_list[:1],
            repeats=repeats,
            atol=atol,
            rtol=rtol,
            allow_plain_jax=allow_plain_jax,
            allow_weak_check=allow_weak_check,
            timeout_s=timeout_s,
            on_progress=say(f"shape contract at {UNALIGNED}"),
            cancel=cancel,
            caller=caller,
        )
        report.checks.append(size_check("contract", UNALIGNED, unaligned.dims, run))
        assert derived is not None
        contract = shape_contract(unaligned, run, comp.size, derived, passed)
        base = next((c.dims for c in comp.check_sizes if c.name == derived.base), None)
        if contract.outcome == "wrong" and len(unaligned.off) > 1 and base:
            # wrong across the output with every dimension moved: one dimension at a time says which
            parts = []
            for k, g in unaligned.off.items():
                one = UnalignedSize(dims=dict(base) | {k: unaligned.dims[k]}, off={k: g})
                alone = ev.validate_at(
                    kernel_path,
                    reference,
                    target,
                    derived.base,
                    seeds=seed_list[:1],
                    repeats=repeats,
                    atol=atol,
                    rtol=rtol,
                    allow_plain_jax=allow_plain_jax,
                    allow_weak_check=allow_weak_check,
                    case=InputCase(name=f"{UNALIGNED}_{k}", sizes={k: unaligned.dims[k]}, base=derived.base),
                    timeout_s=timeout_s,
                    on_progress=say(f"shape contract at {k}={unaligned.dims[k]}"),
                    cancel=cancel,
                    caller=caller,
                )
                report.checks.append(size_check("contract", f"{UNALIGNED} ({k})", one.dims, alone))
                if (
                    failure := contract_failure(
                        one_contract := shape_contract(one, alone, comp.size, derived, passed),
                        alone,
                        passed,
                        False,
                    )
                ) is not None:
                    return finish(failure)
                if one_contract.outcome not in ("general", "could_not_tell"):
                    parts.append(one_contract)
            if parts:
                contract = contract.model_copy(
                    update={
                        "outcome": parts[0].outcome,
                        "finding": "; ".join(c.finding for c in parts),
                        "fix": FIX.format(
                            needs=" and ".join(f"{k} % {g} == 0" for c in parts for k, g in c.off.items())
                        )
                        if any(c.fix for c in parts)
                        else "",
                    }
                )
        report.shape_contract = contract
        if contract.fix:
            report.warnings.append(f"the kernel is silently wrong off its alignment: {contract.finding}")
            report.warnings.append(f"fix: {contract.fix}")
        if (failure := contract_failure(contract, run, passed, strict_shapes)) is not None:
            return finish(failure)
    elif strict_shapes:
        why = (
            "an extra input case runs at one check size only"
            if case is not None
            else unaligned.describe()
            if unaligned is not None
            else "no derived check size to take it from"
        )
        seen.setdefault(f"--strict-shapes: no shape-contract probe ({why})", []).append("validate")
    return finish()


# At the unaligned size, the kernel refusing the shape (its own error, or the compiler's).
RAISES = {
    "python_error",
    "lowering_error",
    "mosaic_error",
    "compile_error",
    "runtime_error",
    "vmem_exhausted",
    "smem_exhausted",
    "shape_mismatch",
}
# At the unaligned size these still fail the verdict: they are not about shapes.
NOT_SHAPE = {"host_callback", "reached_reference", "tampered", "implausible", "cancelled"}
FIX = (
    "where the kernel is called, assert the alignment it needs ({needs} is enough: it was right there) so "
    "a caller gets an error, not a wrong answer; or size the grid with pl.cdiv and mask the last block"
)


def _axis(i: int, ndim: int) -> str:
    return {ndim - 2: "rows", ndim - 1: "columns"}.get(i, f"axis {i}") if ndim >= 2 else "elements"


def _first_line(text: str) -> str:
    return next((x.strip() for x in text.splitlines() if x.strip()), "")[:400]


def shape_contract(
    unaligned: UnalignedSize, run: Any, target: str, derived: DerivedSize, passed: list[str]
) -> ShapeContract:
    """The finding from one run at the unaligned size: every word from what happened there (and at the
    `passed` sizes, which keep the alignment)."""
    off = unaligned.off
    at = ", ".join(f"{k}={unaligned.dims[k]}" for k in off)
    needs = " and ".join(f"{k} % {g} == 0" for k, g in off.items())
    keeps = None
    if target == derived.target and all(k in derived.target_dims for k in off):
        keeps = all(int(derived.target_dims[k]) % g == 0 for k, g in off.items())
        tgt = "the target (" + ", ".join(f"{k}={derived.target_dims[k]}" for k in off) + ")"
        where = f"which {tgt} {'keeps' if keeps else 'breaks'}"
    else:
        tgt = f"{derived.target!r} (the target here, {target!r}, was not compared)"
        where = f"which {tgt} keeps"
    made = {"dims": dict(unaligned.dims), "off": dict(off), "target_keeps": keeps}
    broke = ", ".join(f"{k} % {g} != 0" for k, g in off.items())
    right = f"right where {needs} ({', '.join(passed)})"
    if run.ok:
        return ShapeContract(
            **made,
            outcome="general",
            finding=f"right at {at} too, off the alignment small and the target share: no shape contract seen",
        )
    f = run.failure
    made["failure_kind"] = f.kind
    if f.kind == "output_mismatch":
        seed = next((s for s in run.per_seed if not s.ok and s.mismatch_shape), None)
        state = "left unwritten" if seed is not None and seed.mismatch_unwritten else "wrong"
        if seed is not None and seed.mismatch_tails is not None:
            shape, n = seed.mismatch_shape, len(seed.mismatch_shape)
            slabs = [
                f"{_axis(i, n)} {t}-{shape[i] - 1}" for i, t in enumerate(seed.mismatch_tails) if t < shape[i]
            ]
            output = "" if seed.mismatch_leaf is None else f" of output {seed.mismatch_leaf}"
            extents = {shape[i] for i, t in enumerate(seed.mismatch_tails) if t < shape[i]}
            own = {k: g for k, g in off.items() if unaligned.dims[k] in extents} or off  # the slabs' dims
            mine = " and ".join(f"{k} % {g} == 0" for k, g in own.items())
            gone = ", ".join(f"{k} % {g} != 0" for k, g in own.items())
            return ShapeContract(
                **made,
                outcome="drops_remainder",
                finding=f"{' and '.join(slabs)}{output} {state} at {at} ({gone}); right where {mine} "
                f"({', '.join(passed)}), {where}",
                fix=FIX.format(needs=mine),
            )
        frac = None if seed is None else seed.mismatch_fraction or 0.0
        share = "the output" if frac is None else f"{frac * 100:.2g}% of the output"
        return ShapeContract(
            **made,
            outcome="wrong",
            finding=f"{share} {state} at {at} ({broke}), not only a trailing remainder; {right}, {where}",
            fix=FIX.format(needs=needs),
        )
    if f.kind in RAISES:
        return ShapeContract(
            **made,
            outcome="raises",
            finding=f"raises at {at} ({broke}): {_first_line(f.summary)}; {right}, {where}",
        )
    if f.kind in SIZE_DEPENDENT:
        return ShapeContract(
            **made, outcome="wrong", finding=f"{f.kind} at {at} ({broke}): {_first_line(f.summary)}; {where}"
        )
    return ShapeContract(
        **made,
        outcome="could_not_tell",
        finding=f"at {at} it could not tell ({f.kind}: {_first_line(f.summary)})",
    )


def contract_failure(contract: ShapeContract, run: Any, passed: list[str], strict: bool) -> Failure | None:
    """None where the contract is a finding; the verdict where it must fail it."""
    f = run.failure
    if f is None:
        return None
    if f.kind in NOT_SHAPE:
        return f
    if contract.outcome == "could_not_tell" and not strict:
        return None
    if strict or contract.target_keeps is False:
        why = "--strict-shapes" if strict else "the target breaks the alignment the kernel needs"
        return Failure(
            kind="shape_specialized",
            summary=f"{why}: right at {', '.join(passed)}; {contract.finding}"[:1500],
            message=f.message,
            stage=f.stage,
            line=f.line,
            cause_kind=f.kind,
            sizes_passed=list(passed),
            sizes_failed=[UNALIGNED],
        )
    return None
