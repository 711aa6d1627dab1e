"""Validation across sizes, judge side: compile at the target size, then run at every check size.

The kernel is for the target size (the production shape), so it must compile there with the real
compiler for the target; interpret mode at that size is too slow off the chip, so the numbers are
checked at the check sizes (small and a derived intermediate size, problem/sizes.py). The same source
must do both: a kernel that works at one size and fails at another is `shape_specialized`, naming the
sizes, whatever the kind of failure where it broke (kept as `cause_kind`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from maxkernel.tpu_tools.judge.error_rule import rule_summary
from maxkernel.tpu_tools.judge.outcomes import interpret_limit
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.kernel_program import differences, unvalidated
from maxkernel.tpu_tools.problem.sizes import (
    GROWN,
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
    "revisited_output_block",
    "out_of_bounds",
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
    draw = offset if offset is not None else seed_list[0]  # the derived size is drawn from it
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

    def compile_at(name: str, doing: str) -> Any:
        """A compile-only look at another size (cheap: nothing is interpreted)."""
        other = ev.compile(
            kernel_path,
            reference,
            target,
            name,
            derive_seed=draw,
            timeout_s=timeout_s,
            on_progress=say(doing),
            cancel=cancel,
        )
        report.phases += other.phases
        return other

    # 1. The target size: the real compiler for the target, before anything is interpreted.
    comp = ev.compile(
        kernel_path,
        reference,
        target,
        size,
        check_sizes=check_sizes,
        resolve_checks=True,
        derive_seed=draw,
        timeout_s=timeout_s,
        on_progress=say(f"compile at {size or 'the target size'}"),
        cancel=cancel,
    )
    report.size, report.size_note, report.reference = comp.size, comp.size_note, comp.reference
    report.phases = list(comp.phases)
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
            other = compile_at(check.name, f"compile at {check.name}")
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
    compared: list = []  # every check size's per-seed errors: the error rule's line covers them all
    programs: dict[str, Any] = {}  # check size -> the kernel program its run traced

    # every run at a check size shares the caller's options; each call names its size, seeds and progress
    run_at = functools.partial(
        ev.validate_at,
        kernel_path,
        reference,
        target,
        repeats=repeats,
        atol=atol,
        rtol=rtol,
        allow_plain_jax=allow_plain_jax,
        allow_weak_check=allow_weak_check,
        timeout_s=timeout_s,
        cancel=cancel,
        caller=caller,
        derive_seed=draw,
    )

    def check_at(name: str, **kw: Any) -> Any:
        run = run_at(name, **kw)
        report.phases += run.phases  # where the time went, every size's runs in order
        return run

    def validate_grown(name: str) -> Any:
        return check_at(
            name, seeds=seed_list[:1], on_progress=say(f"validate at {name} (the target's program)")
        )

    def trace_at(name: str) -> Any:
        """The kernel program at a grown size, from a compile there (cheap: nothing is interpreted)."""
        other = compile_at(name, f"trace at {name}")
        return other.program if other.ok else None

    for name in names:
        run = check_at(name, seeds=seed_list, case=case, on_progress=say(f"validate at {name}"))
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
        compared += run.per_seed
        report.error_summary = rule_summary(compared, run.numerics) or run.error_summary  # every size so far
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
        programs[name] = run.program
    derived = next((c.derived for c in comp.check_sizes if c.derived is not None), None)
    # 3. The program at the target is the program that was checked (else a run at a size that has it)
    if case is None:
        failure = _same_program(
            comp,
            programs,
            derived,
            passed,
            report,
            dims,
            validate_grown,
            trace_at,
            enforce=check_sizes is None,
        )
        if failure is not None:
            return finish(failure)
    # 4. The shape contract: more runs, off the alignment small and the target share (a finding): every
    # dimension moved alone, and all together; a refusal on one dimension cannot hide a wrong answer on another
    unaligned = derived.unaligned if derived is not None else None
    if case is None and unaligned is not None and unaligned.ok and (check_sizes is None or strict_shapes):
        assert derived is not None

        def probe(name: str, label: str, at: dict) -> Any:
            run = check_at(name, seeds=seed_list[:1], on_progress=say(f"shape contract at {label}"))
            report.checks.append(size_check("contract", label, at, run))
            return run

        found: list[tuple[ShapeContract, Any]] = []
        if len(unaligned.off) > 1:
            for k, g in unaligned.off.items():
                if k not in unaligned.alone:
                    continue
                one = UnalignedSize(dims=unaligned.alone[k], off={k: g})
                run = probe(f"{UNALIGNED}:{k}", f"{UNALIGNED} ({k})", one.dims)
                found.append((shape_contract(one, run, comp.size, derived, passed), run))
        run = probe(UNALIGNED, UNALIGNED, unaligned.dims)
        together = shape_contract(unaligned, run, comp.size, derived, passed)
        contract = together
        if found:
            shown = [c for c, _ in found if c.outcome != "general"]
            if not shown and together.outcome != "general":
                shown = [together]  # right one at a time, not all together: that is the finding
            elif together.outcome != "general" and together.outcome not in {c.outcome for c in shown}:
                shown.append(together)
            shown.sort(key=lambda c: SEVERITY.index(c.outcome))  # the silently wrong first
            head = shown[0] if shown else together
            contract = together.model_copy(
                update={
                    "outcome": head.outcome,
                    "finding": "; ".join(f"{_label(c, unaligned)}: {c.finding}" for c in shown)
                    if shown
                    else together.finding,
                    "fix": FIX.format(
                        needs=" and ".join(
                            f"{k} % {g} == 0" for c in shown if c.fix for k, g in c.off.items()
                        )
                    )
                    if any(c.fix for c in shown)
                    else "",
                    "dimensions": [c for c, _ in found],
                }
            )
        report.shape_contract = contract
        if contract.fix:
            silent = [c for c in contract.dimensions if c.fix] or [contract]
            said = "; ".join(
                (f"{_label(c, unaligned)}: " if c is not contract else "") + c.finding for c in silent
            )
            report.warnings.append(f"the kernel is silently wrong off its alignment: {said}")
            report.warnings.append(f"fix: {contract.fix}")
        for c, r in [*found, (together, run)]:
            if (failure := contract_failure(c, r, passed, strict_shapes)) is not None:
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


def _same_program(
    comp: Any,
    programs: dict[str, Any],
    derived: DerivedSize | None,
    passed: list[str],
    report: ValidationReport,
    dims: dict[str, dict],
    validate_grown: Callable[[str], Any],
    trace_at: Callable[[str], Any],
    *,
    enforce: bool = True,
) -> Failure | None:
    """None where what the kernel program runs at the target was run at a validated size
    (problem/kernel_program.py `unvalidated`: one validated program is the target's, grid aside, and every
    branch its grid takes, op under it and part of an operand it leaves out, some validated size had too).
    Where not, the grown sizes (the derived size's lead dimension, then each dimension alone, toward the
    target) are traced, and each whose program runs some of what is missing is validated; what none ran is
    `shape_specialized`, naming it. Every word from what was traced. With check sizes the caller chose
    (`enforce` False), a difference is a warning: `compose` checks a whole model step at small, where a
    kernel may take its one-block path."""
    target = comp.program
    if target is None or not programs or any(p is None for p in programs.values()):
        report.target_program = "could not tell: the kernel program was not read at every size"
        return None
    left, nearest = unvalidated(target, programs, comp.size)
    if not left:
        report.target_program = (
            f"the kernel program at {comp.size} is the one validated at {_same(programs, target, comp.size)}"
        )
        return None
    if not enforce:  # check sizes the caller chose (compose's whole step at small): a finding, no more runs
        report.target_program = (
            f"differs from every validated one ({'; '.join(left)}); not enforced: the check sizes were chosen"
        )
        report.warnings.append(
            f"the kernel program at {comp.size} was not validated: {report.target_program}"
        )
        return None
    grown: dict[str, dict] = {}
    if derived is not None and derived.grown_dims is not None:
        grown[GROWN] = derived.grown_dims
    if derived is not None:
        grown |= {f"{GROWN}:{k}": d for k, d in derived.grown_alone.items()}
    tried: list[str] = []
    for name, at_dims in grown.items():
        traced = trace_at(name)
        if traced is None:
            continue
        if unvalidated(target, {**programs, name: traced}, comp.size)[0] == left and left:
            continue  # it reaches nothing the target is missing: not worth an interpret run
        run = validate_grown(name)
        report.checks.append(size_check("validate", name, at_dims, run))
        at = ", ".join(f"{k}={v}" for k, v in at_dims.items() if dims.get(passed[0], {}).get(k) != v)
        if not run.ok:
            failure = run.failure or Failure(
                kind="internal_error", summary="validation failed without a failure"
            )
            report.target_program = f"runs what no check size did ({'; '.join(left)}); wrong at {name} ({at})"
            if failure.kind in SIZE_DEPENDENT:
                out = specialized(failure, passed, name, "right")
                out.summary = (
                    f"{out.summary}; run at {name} ({at}) because the kernel program at {comp.size} runs what no "
                    f"check size did: {'; '.join(left)}"
                )[:1500]
                return out
            return failure
        if run.program is None:
            continue
        programs[name] = run.program
        passed.append(name)
        tried.append(f"{name} ({at})")
        left, nearest = unvalidated(target, programs, comp.size)
        if not left:
            report.target_program = (
                f"the kernel program at {comp.size} is the one validated at "
                f"{_same(programs, target, comp.size)}: what only its longer grid reaches was run at "
                f"{', '.join(tried)}"
            )
            return None
    if not grown and all(" over the grid at " in d or "under a branch on the grid" in d for d in left):
        # no size here can grow (an author's derived size: a model region): branches only a longer grid
        # takes, with the rest of the program validated, are said, not failed; parts left out still fail
        report.target_program = (
            f"the target reaches branches on the grid position that no check size reached ({'; '.join(left)});"
            f" no grown size to run them at; the rest of its program is the one validated at "
            f"{_same(programs, target, comp.size)}"
        )
        report.warnings.append(f"not validated: {report.target_program}")
        return None
    why = (
        f"run at {', '.join(tried)} too"
        if tried
        else "no grown size reaches it"
        if grown
        else (derived.grown_why or derived.why)
        if derived is not None
        else "no larger check size to run it at"
    )
    report.target_program = f"runs what no validated size did ({'; '.join(left)}); {why}"
    return Failure(
        kind="shape_specialized",
        summary=(
            f"the kernel program at {comp.size} runs what no validated size ({', '.join(passed)}) did: "
            f"{'; '.join(left)}; {why}"
        )[:1500],
        stage="trace",
        sizes_passed=list(passed),
        sizes_failed=[comp.size],
    )


def _same(programs: dict[str, Any], target: Any, at: str) -> str:
    """The validated sizes whose program is the target's, grid aside."""
    names = [n for n, p in programs.items() if not differences(target, p, at, n, over_grid=False)]
    exact = [n for n in names if not differences(target, programs[n], at, n)]
    return ", ".join(exact or names)


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
SEVERITY = ("wrong", "drops_remainder", "raises", "could_not_tell", "general")
# At the unaligned size these still fail the verdict: they are not about shapes.
NOT_SHAPE = {"host_callback", "reached_reference", "tampered", "implausible", "cancelled"}
FIX = (
    "where the kernel is called, assert the alignment it needs ({needs} is enough: it was right there) so "
    "a caller gets an error, not a wrong answer; or size the grid with pl.cdiv and mask the last block"
)


def _label(c: ShapeContract, unaligned: UnalignedSize) -> str:
    """`rows alone` or `all together`: which run a finding is from."""
    return f"{', '.join(c.off)} alone" if len(c.off) < len(unaligned.off) else "all together"


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
