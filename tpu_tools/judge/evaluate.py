"""The evaluation facade: compile/validate a candidate through the worker pool, always returning a report.

A hang, crash, OOM or exit inside a child becomes a Failure in the report; the caller stays up.
Usable from threads (the MCP server) with a `cancel` event that kills the child.
"""

from __future__ import annotations

import random
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.judge.error_rule import rule_summary
from maxkernel.tpu_tools.judge.outcomes import (
    R,
    abs_reference,
    hide_paths_for,
    integrity_evidence,
    outcome_failure,
    stamp_sandbox,
)
from maxkernel.tpu_tools.judge.phases import JobClock, compile_phases, timed
from maxkernel.tpu_tools.judge.sizes import size_check
from maxkernel.tpu_tools.judge.validate import f32, run_order
from maxkernel.tpu_tools.pool.handover import HandoverError, load_arrays
from maxkernel.tpu_tools.pool.sandbox import make_scratch_dir
from maxkernel.tpu_tools.pool.workers import JobOutcome, JobSpec, WorkerPool, get_default_pool
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.reports import CompileReport, Failure, ReferenceSide, ValidationReport

if TYPE_CHECKING:
    from maxkernel.tpu_tools.profile.run import ProfileReport
    from maxkernel.tpu_tools.profile.trace_summary import TraceSummary

DEFAULT_TIMEOUT_S = 300.0
RUNS_PER_SEED = 2  # every input set runs this many times, interleaved with the others
MAX_SEED_OFFSET = 2**31 - 1

ProgressFn = Callable[[str], None]


def resolve_seeds(seeds: int | list[int], seed_offset: int | None) -> tuple[list[int], int | None]:
    """(seed list, offset): `seeds` consecutive seeds from `seed_offset`, drawn at random when None."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise UsageError(
                f"--seeds should be at least 1, got {seeds}: a check on no inputs proves nothing"
            )
        offset = secrets.randbelow(MAX_SEED_OFFSET - 1000) if seed_offset is None else int(seed_offset)
        if offset < 0:
            raise UsageError(f"--seed-offset should be >= 0, got {offset}")
        return list(range(offset, offset + seeds)), offset
    seed_list = [int(s) for s in seeds]
    if not seed_list:
        raise UsageError("no seeds given: a check on no inputs proves nothing")
    if len(set(seed_list)) != len(seed_list):
        raise UsageError(f"seeds repeat: {seed_list}")
    return seed_list, None


def _copyable_inputs(scratch: Path, seeds: list[int], side: ReferenceSide) -> dict:
    """Inputs shaped like the single output (for the 'copy of input' weak check), read before the candidate runs."""
    if len(side.output_specs) != 1:
        return {}
    want = side.output_specs[0].shape
    if not any(s.shape == want for s in side.input_specs):
        return {}
    return {s: f32(load_arrays(scratch, f"inputs_{s}", expect=side.input_specs)) for s in seeds}


def _regimes_said(per_seed: list) -> str:
    """The input regimes of the wrong seeds, when any is not the reference's own draw (input_regimes.py)."""
    wrong = [r for r in per_seed if not r.ok]
    if all(r.inputs == "reference" for r in wrong):
        return ""
    said = ", ".join(f"seed {r.seed}: {r.inputs}" for r in wrong)
    right = [r.seed for r in per_seed if r.ok and r.inputs == "reference"]
    own = f"; right on the reference's own draw (seed {right[0]})" if right else ""
    return f"; inputs of the wrong seeds: {said}{own} (problem/input_regimes.py)"


class Evaluator:
    """compile/validate entry points shared by the CLI, the MCP server and benchmarks."""

    def __init__(self, pool: WorkerPool | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.pool = pool or get_default_pool()
        self.timeout_s = timeout_s

    def _on_device(self, target: str) -> bool:
        """On a TPU host only the device-owning worker sees the chip: route every non-CPU job through it."""
        return bool(getattr(self.pool, "device_owner", False)) and target != "cpu"

    def _run(
        self,
        fn: str,
        kwargs: dict,
        *,
        timeout_s: float | None,
        on_progress: ProgressFn | None,
        cancel: threading.Event | None,
        needs_device: bool = False,
        scratch_dir: str | None = None,
        hide_paths: tuple[str, ...] = (),
        host_devices: int = 1,
        clock: JobClock | None = None,
    ) -> JobOutcome:
        """`clock`: times the job and each progress line it sends (judge/phases.py)."""
        if clock is not None:
            clock.forward, on_progress = on_progress, clock
            clock.started = time.perf_counter()
        spec = JobSpec(
            fn=fn,
            kwargs=kwargs,
            timeout_s=timeout_s or self.timeout_s,
            needs_device=needs_device,
            host_devices=host_devices,
            scratch_dir=scratch_dir,
            hide_paths=tuple(hide_paths),
        )
        handle = self.pool.submit(spec, on_progress=on_progress)
        while True:
            outcome = handle.wait(0.1)
            if outcome is not None:
                if clock is not None:
                    clock.stop()
                return outcome
            if cancel is not None and cancel.is_set():
                handle.cancel()

    def _report(
        self,
        model: type[R],
        what: str,
        job: str,
        kwargs: dict,
        *,
        timeout_s: float | None,
        on_progress: ProgressFn | None,
        cancel: threading.Event | None,
        hide_paths: tuple[str, ...] = (),
        host_devices: int = 1,
        needs_device: bool | None = None,
    ) -> R:
        """Run a one-child job returning a report; a child that ended otherwise becomes that report's failure."""
        started = time.perf_counter()
        if on_progress:
            on_progress(what)
        target = kwargs["target"]
        outcome = self._run(
            job,
            kwargs,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            needs_device=self._on_device(target) if needs_device is None else needs_device,
            hide_paths=hide_paths,
            host_devices=host_devices,
        )
        # the judged child's integrity events, sent the moment they happened: what it did afterwards
        # (catching the refusal, clearing its lists) cannot undo them
        breach = integrity_evidence(outcome.progress) if hide_paths else None
        if outcome.status == "ok" and outcome.result is not None:
            done = model.model_validate(outcome.result)
            if breach is not None:
                done.failure, done.ok = breach, False
            return stamp_sandbox(done, outcome)
        report = model(
            ok=False,
            target=target,
            size=kwargs["size"] or "default",
            kernel_path=kwargs["kernel_path"],
            failure=breach or outcome_failure(outcome, what),
            wall_time_s=round(time.perf_counter() - started, 4),
        )
        return stamp_sandbox(report, outcome)

    def reference_side(
        self,
        reference: str,
        size: str | None,
        *,
        check_sizes: list[str] | None = None,
        resolve_checks: bool = False,
        with_values: bool = False,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
        derive_seed: int | None = None,
        target: str | None = None,
    ) -> tuple[ReferenceSide | None, Failure | None]:
        """All a judged child may know of the reference (shapes, MESH, flops), from a reference-only child;
        with `resolve_checks`, the check sizes too (names and dims); with `with_values`, the values of its
        small integer inputs (the estimate's data-dependent work)."""
        outcome = self._run(
            "maxkernel.tpu_tools.judge.validate:reference_specs_job",
            {
                "reference": abs_reference(reference),
                "size": size,
                "check_sizes": list(check_sizes) if check_sizes else None,
                "resolve_checks": resolve_checks,
                "with_values": with_values,
                "derive_seed": derive_seed,
                "target": target,
            },
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )
        if outcome.status != "ok" or outcome.result is None:
            return None, outcome_failure(outcome, "reference")
        side = ReferenceSide.model_validate(outcome.result)
        return side, (None if side.ok else side.failure)

    def compile(
        self,
        kernel_path: str,
        reference: str,
        target: str = "tpu-v6e",
        size: str | None = None,
        *,
        check_sizes: list[str] | None = None,
        resolve_checks: bool = False,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
        derive_seed: int | None = None,
    ) -> CompileReport:
        """Shapes from a reference-only child, then the candidate compiled in a child that never sees the
        reference. `size` None: the reference's production size. With `resolve_checks` the report also
        carries the resolved check sizes (validate asks; nothing runs at them here)."""
        started = time.perf_counter()
        kernel_path = str(Path(kernel_path).expanduser().resolve())
        reference = abs_reference(reference)
        base = CompileReport(ok=False, target=target, size=size or "default", kernel_path=kernel_path)
        if on_progress:
            on_progress("compile")
        t0 = time.perf_counter()
        side, failure = self.reference_side(
            reference,
            size,
            check_sizes=check_sizes,
            resolve_checks=resolve_checks,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            derive_seed=derive_seed,
            target=target,
        )
        looked_up = timed("reference_side", side.size if side else size, time.perf_counter() - t0)
        if failure is not None or side is None:
            base.reference, base.failure = side.reference if side else None, failure
            base.phases = [looked_up]
            base.wall_time_s = round(time.perf_counter() - started, 4)
            return base
        hidden = hide_paths_for(reference, kernel_path)
        kwargs = {
            "kernel_path": kernel_path,
            "target": target,
            "size": side.size,
            "reference_side": side.model_dump(mode="json"),
            "hide_paths": list(hidden),
        }
        mesh = side.reference.mesh if side.reference else None
        t0 = time.perf_counter()
        report = self._report(
            CompileReport,
            "compile",
            "maxkernel.tpu_tools.judged.compile:compile_job",
            kwargs,
            timeout_s=timeout_s,
            on_progress=None,
            cancel=cancel,
            hide_paths=hidden,
            # a mesh kernel compiled for CPU runs its mesh on CPU devices (a TPU target uses a topology,
            # compiled off the chip in a forked child on a TPU host too)
            host_devices=mesh.device_count if mesh and target == "cpu" else 1,
            needs_device=False if mesh else None,
        )
        report.phases = [looked_up, *compile_phases(time.perf_counter() - t0, report.times, side.size)]
        report.size_note = side.size_note
        report.check_sizes = side.check_sizes
        report.checks = [size_check("compile", side.size, side.size_dims, report)]
        report.wall_time_s = round(time.perf_counter() - started, 4)
        return report

    def validate(
        self,
        kernel_path: str,
        reference: str,
        target: str = "cpu",
        size: str | None = None,
        *,
        check_sizes: list[str] | None = None,
        seeds: int | list[int] = 3,
        seed_offset: int | None = None,
        repeats: int = RUNS_PER_SEED,
        atol: float | None = None,
        rtol: float | None = None,
        allow_plain_jax: bool = False,
        allow_weak_check: bool = False,
        case: InputCase | None = None,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
        caller: Literal["api", "cli", "mcp"] = "api",
        strict_shapes: bool = False,
    ) -> ValidationReport:
        """Compile for `target` at the target size `size` (default: the production size), then run the
        kernel against the reference at every check size (default: small and the derived size).

        A compile failure is the verdict. A kernel that works at one size and fails at another fails as
        `shape_specialized`, naming the sizes. With `case`, the case runs over the first check size only.
        On a chip, validation also runs at the target size. With the default check sizes, one more run off
        the alignment small and the target share reports the kernel's shape contract (`shape_contract`), a
        finding; `strict_shapes` makes it a check.
        """
        from maxkernel.tpu_tools.judge.sizes import validate_at_sizes

        seed_list, offset = resolve_seeds(seeds, seed_offset)
        if repeats < 2:
            raise UsageError(f"repeats should be >= 2 (each input set runs more than once), got {repeats}")
        return validate_at_sizes(
            self,
            kernel_path,
            reference,
            target,
            size,
            check_sizes=check_sizes,
            seed_list=seed_list,
            seed_offset=offset,
            repeats=repeats,
            atol=atol,
            rtol=rtol,
            allow_plain_jax=allow_plain_jax,
            allow_weak_check=allow_weak_check,
            case=case,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            caller=caller,
            strict_shapes=strict_shapes,
        )

    def validate_at(
        self,
        kernel_path: str,
        reference: str,
        target: str,
        size: str,
        *,
        seeds: int | list[int] = 3,
        seed_offset: int | None = None,
        repeats: int = RUNS_PER_SEED,
        atol: float | None = None,
        rtol: float | None = None,
        allow_plain_jax: bool = False,
        allow_weak_check: bool = False,
        case: InputCase | None = None,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
        caller: Literal["api", "cli", "mcp"] = "api",
        derive_seed: int | None = None,
    ) -> ValidationReport:
        """One check size: validate on `seeds` input sets (an int: that many, from `seed_offset`, drawn at
        random if None), with no compile at the target (`validate` does that first).

        `caller` spells the options a verdict tells its reader to pass (`--allow-weak-check` on the command
        line, `allow_weak_check` over MCP and in Python).

        The reference child writes inputs and expected outputs; the candidate child, which never sees the
        reference, runs every set `repeats` times in a shuffled interleaved order; this process compares.
        """
        from maxkernel.tpu_tools.judge.validate import judge_runs

        started = time.perf_counter()
        kernel_path = str(Path(kernel_path).expanduser().resolve())
        reference = abs_reference(reference)
        seed_list, offset = resolve_seeds(seeds, seed_offset)
        if repeats < 2:
            raise UsageError(f"repeats should be >= 2 (each input set runs more than once), got {repeats}")
        case_dict = case.model_dump(mode="json") if case is not None else None
        report = ValidationReport(
            ok=False,
            target=target,
            size=size or "default",
            kernel_path=kernel_path,
            seeds=seed_list,
            seed_offset=offset,
            case=case,
        )

        outcomes: list[JobOutcome] = []  # the last one's sandbox (the candidate's, once it ran) is stamped
        ref_clock, cand_clock = JobClock(), JobClock()
        compared_s: list[float] = []

        def finish(failure: Failure | None = None) -> ValidationReport:
            if failure is not None:
                report.failure, report.ok = failure, False
            report.phases = ref_clock.phases("reference", size) if outcomes else []
            if len(outcomes) > 1:
                report.phases += cand_clock.phases(
                    "candidate", size, interpreted="interpret" in report.execution
                )
            report.phases += [timed("compare", size, s) for s in compared_s]
            report.wall_time_s = round(time.perf_counter() - started, 4)
            return stamp_sandbox(report, outcomes[-1]) if outcomes else report

        budget_s = timeout_s or self.timeout_s  # one limit for the whole validation, both children

        def left() -> float:
            return max(0.5, budget_s - (time.perf_counter() - started))

        def ended(outcome: JobOutcome, what: str) -> Failure:
            failure = outcome_failure(outcome, what)
            if outcome.status == "timeout":
                failure.summary = (
                    f"{what}: timed out: the validation's {budget_s:g} s limit ran out ({outcome.message})"
                )
            return failure

        root = Path(make_scratch_dir("validate-"))  # under the sandbox's scratch root: every lane can bind it
        scratch, expected_dir = root / "scratch", root / "expected"
        scratch.mkdir()
        expected_dir.mkdir()
        try:
            outcome = self._run(
                "maxkernel.tpu_tools.judge.validate:reference_job",
                {
                    "reference": reference,
                    "size": size,
                    "seeds": seed_list,
                    "inputs_dir": str(scratch),
                    "expected_dir": str(expected_dir),
                    "case": case_dict,
                    "atol": atol,
                    "rtol": rtol,
                    "target": target,
                    "derive_seed": derive_seed,
                },
                timeout_s=left(),
                on_progress=on_progress,
                cancel=cancel,
                needs_device=self._on_device(target),
                scratch_dir=str(root),
                clock=ref_clock,
            )
            outcomes.append(outcome)
            if outcome.status != "ok" or outcome.result is None:
                return finish(ended(outcome, "reference"))
            side = ReferenceSide.model_validate(outcome.result)
            report.reference, report.size, report.size_note = (
                side.reference,
                side.size or report.size,
                side.size_note,
            )
            if not side.ok or side.tolerance is None:
                return finish(side.failure)
            expected = {
                s: f32(load_arrays(expected_dir, f"expected_{s}", expect=side.output_specs))
                for s in seed_list
            }
            oracle = {
                s: load_arrays(expected_dir, f"oracle_{s}")
                for s in seed_list
                if (expected_dir / f"oracle_{s}.json").exists()
            }
            report.numerics = side.numerics
            inputs = _copyable_inputs(scratch, seed_list, side)
            shutil.rmtree(expected_dir)  # gone before any candidate code starts
            order = run_order(seed_list, repeats, random.Random(secrets.randbits(64)))
            report.run_order = order
            mesh = side.reference.mesh if side.reference else None
            # A kernel over a mesh runs on N CPU devices in interpret mode, on a TPU host too (its forked
            # children never open the chips); native multi-chip runs on a slice are not wired yet.
            on_device = self._on_device(target) and mesh is None
            report.devices = mesh.device_count if mesh else 1
            outcome = self._run(
                "maxkernel.tpu_tools.judged.candidate_run:candidate_job",
                {
                    "kernel_path": kernel_path,
                    "target": target,
                    "scratch_dir": str(scratch),
                    "seeds": seed_list,
                    "order": order,
                    "size": side.size,
                    "hide_paths": list(hide_paths_for(reference, kernel_path)),
                    "reference_census": side.census.model_dump(mode="json") if side.census else None,
                    "allow_plain_jax": allow_plain_jax,
                    "mesh": mesh.model_dump(mode="json") if mesh else None,
                    "absent_inputs": side.absent_inputs,
                },
                timeout_s=left(),
                on_progress=on_progress,
                cancel=cancel,
                needs_device=on_device,
                scratch_dir=str(scratch),
                hide_paths=hide_paths_for(reference, kernel_path) + (str(expected_dir),),
                host_devices=mesh.device_count if mesh and not on_device else 1,
                clock=cand_clock,
            )
            outcomes.append(outcome)
            if (failure := integrity_evidence(outcome.progress)) is not None:
                return finish(
                    failure
                )  # sent the moment it happened: what the child did afterwards cannot undo it
            if outcome.status != "ok" or outcome.result is None:
                return finish(ended(outcome, "candidate run"))
            cand = ValidationReport.model_validate(outcome.result)
            report.execution, report.kernel_sha256 = cand.execution, cand.kernel_sha256
            report.has_pallas_call, report.work, report.races_found = (
                cand.has_pallas_call,
                cand.work,
                cand.races_found,
            )
            report.environment, report.devices = cand.environment, cand.devices
            report.program = cand.program
            report.warnings += cand.warnings
            if not cand.ok:
                return finish(cand.failure)
            t0 = time.perf_counter()
            runs = []
            counts: dict[int, int] = {}
            for seed in order:
                k = counts.get(seed, 0)
                counts[seed] = k + 1
                try:
                    runs.append((seed, k, load_arrays(scratch, f"out_{seed}_{k}", expect=side.output_specs)))
                except HandoverError as e:
                    want = ", ".join(f"{s.dtype}{s.shape}" for s in side.output_specs)
                    return finish(
                        Failure(
                            kind="shape_mismatch",
                            summary=f"output of run {len(runs) + 1} (seed {seed}) differs from the reference's {want}: {e}",
                            stage="compare",
                        )
                    )
            j = judge_runs(
                expected,
                runs,
                side.tolerance,
                [s.dtype for s in side.output_specs],
                inputs,
                side.cannot_tell,
                oracle if len(oracle) == len(seed_list) else None,
                seed_tols=side.seed_tolerances,
            )
            compared_s.append(time.perf_counter() - t0)
            for result in j.per_seed:  # what ran: each seed's input regime, and why one fell back
                result.inputs = side.input_regimes.get(result.seed, "reference")
                result.inputs_note = side.input_regime_notes.get(result.seed)
            report.warnings += [f"seed {s}: {note}" for s, note in side.input_regime_notes.items()]
            report.per_seed, report.tolerance, report.weak_check = j.per_seed, j.tolerance, j.weak_check
            if j.failure is not None and j.failure.kind == "output_mismatch":
                j.failure.summary += _regimes_said(j.per_seed)
            report.error_summary = rule_summary(j.per_seed, side.numerics)
            report.warnings += j.warnings
            failure = j.failure
            if failure is not None and failure.kind == "weak_check" and allow_weak_check:
                report.warnings.append(failure.summary)
                failure = None
            elif failure is not None and failure.kind == "weak_check":
                flag = {"cli": "--allow-weak-check", "mcp": "allow_weak_check: true"}.get(
                    caller, "allow_weak_check=True"
                )
                failure.summary += f" (pass {flag} to accept)"
            if failure is not None and failure.kind == "output_mismatch" and "interpret" in report.execution:
                nan = [r for r in report.per_seed if not r.ok and r.nan_count and not r.reference_nan_count]
                if nan:  # the commonest cause, and one that only shows in interpret mode
                    failure.summary += (
                        f"; the kernel output NaN where the reference has numbers ({nan[0].nan_count} on seed "
                        f"{nan[0].seed}): interpret mode fills uninitialised buffers with NaN, so an "
                        "accumulator never initialised (e.g. under @pl.when(k == 0)) or an output block never "
                        "written shows up as NaN"
                    )
            report.ok = failure is None
            return finish(failure)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # ---- profile (appended: the profile/trace issue) -----------------------------------------------
    def profile(
        self,
        kernel_path: str,
        reference: str,
        target: str = "cpu",
        size: str | None = None,
        *,
        trace_dir: str | None = None,
        measure_interpret: bool = False,
        reps: int = 30,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> ProfileReport:
        """Time the candidate against the reference in separate processes, trace it, estimate it for the target.

        The judging runs here (profile.run_profile): this process hands out the inputs, timestamps the
        timed calls and compares their outputs; candidate and reference each run in their own children.
        """
        from maxkernel.tpu_tools.profile.run import ProfileReport, run_profile

        if on_progress:
            on_progress("profile")
        if size is None:  # the target size: the reference's production size, resolved by a reference child
            side, failure = self.reference_side(
                reference, None, timeout_s=timeout_s, on_progress=on_progress, cancel=cancel, target=target
            )
            if failure is not None or side is None:
                return ProfileReport(
                    ok=False, target=target, size="default", kernel_path=kernel_path, failure=failure
                )
            size = side.size
        return run_profile(
            str(Path(kernel_path).expanduser().resolve()),
            abs_reference(reference),
            target,
            size,
            pool=self.pool,
            trace_dir=str(Path(trace_dir).expanduser().resolve()) if trace_dir else None,
            measure_interpret=measure_interpret,
            reps=reps,
            timeout_s=timeout_s or self.timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            needs_device=self._on_device(target),
        )

    def estimate(
        self,
        kernel_path: str,
        reference: str,
        target: str = "tpu-v6e",
        size: str | None = None,
        *,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ):
        """Static TPU estimate of a candidate (traced and compiled for the target in a child; nothing runs)."""
        from maxkernel.tpu_tools.cost.estimate import EstimateReport, StaticEstimate

        kernel_path = str(Path(kernel_path).expanduser().resolve())
        report = EstimateReport(ok=False, kernel_path=kernel_path, target=target, size=size or "default")
        side, outcome, failure = self._beside_reference_side(
            "maxkernel.tpu_tools.judged.estimate_jobs:estimate_job",
            kernel_path,
            reference,
            target,
            size,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )
        if side is not None:
            report.size = side.size  # the target size (None asked: the reference's production size)
        if failure is not None or outcome is None:
            report.failure = failure
        elif outcome.status != "ok" or outcome.result is None:
            report.failure = outcome_failure(outcome, "estimate")
        elif not outcome.result.get("ok"):
            res = outcome.result
            error = str(res.get("error", "unknown"))
            if "compiler_vmem_bytes" in res:
                need, limit = int(res["compiler_vmem_bytes"]), int(res["compiler_vmem_limit"])
                not_compiled = bool(res.get("not_compiled"))
                report.failure = Failure(
                    kind="vmem_exhausted",
                    summary=(
                        f"no estimate: {str(res.get('compile_error') or error).splitlines()[0][:300]}"
                        if not_compiled  # our check on the traced body, before any compile: its own words
                        else f"no estimate: the compiler needs {need} B of VMEM, over its {limit} B limit"
                    ),
                    message=str(res.get("compile_error") or error),
                    stage="trace" if not_compiled else "compile",
                    requested_bytes=need,
                    capacity_bytes=limit,
                )
            elif "compile_error" in res:
                report.failure = Failure(
                    kind="compile_error",
                    summary=f"no estimate: {error.splitlines()[0][:300]}",
                    message=str(res["compile_error"]),
                    stage="trace" if res.get("not_compiled") else "compile",
                )
            else:
                kind = "tampered" if error.startswith("tampered") else "python_error"
                report.failure = Failure(
                    kind=kind, summary=f"no estimate: {error.splitlines()[0][:300]}", message=error
                )
            report.layout_problems = list(res.get("layout_problems") or [])
        else:
            report.ok = True
            report.estimate = StaticEstimate.model_validate(outcome.result["estimate"])
            report.layout_problems = list(outcome.result.get("layout_problems") or [])
        return report

    def analyze(
        self,
        kernel_path: str,
        reference: str,
        target: str = "tpu-v6e",
        size: str | None = None,
        *,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ):
        """What the TPU compiler made of a candidate: `analyze_job` in a child (fresh libtpu, so the dump
        flags take), given the reference's shapes by a reference-only child."""
        from maxkernel.tpu_tools.cost.analyze import AnalysisReport

        path = str(Path(kernel_path).expanduser().resolve())
        report = AnalysisReport(
            ok=False, tier="model", kernel_path=path, target=target, size=size or "default"
        )
        side, outcome, failure = self._beside_reference_side(
            "maxkernel.tpu_tools.judged.estimate_jobs:analyze_job",
            path,
            reference,
            target,
            size,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )
        if side is not None:
            report.size = side.size  # the target size (None asked: the reference's production size)
        if failure is not None or outcome is None:
            report.failure = failure
        elif outcome.status == "ok" and outcome.result is not None:
            return AnalysisReport.model_validate(outcome.result)
        else:
            report.failure = outcome_failure(outcome, "analyze")
        return report

    def _beside_reference_side(
        self,
        job: str,
        kernel_path: str,
        reference: str,
        target: str,
        size: str | None,
        *,
        timeout_s: float | None,
        on_progress: ProgressFn | None,
        cancel: threading.Event | None,
    ) -> tuple[ReferenceSide | None, JobOutcome | None, Failure | None]:
        """A judged job that needs the reference's shapes: the reference-only child first (it resolves the
        target size), then the job with that ReferenceSide and the reference hidden."""
        side, failure = self.reference_side(
            reference,
            size,
            with_values=True,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
            target=target,
        )
        if failure is not None or side is None:
            return side, None, failure
        kwargs = {
            "kernel_path": kernel_path,
            "reference_side": side.model_dump(mode="json"),
            "target": target,
            "size": side.size,
        }
        hidden = hide_paths_for(abs_reference(reference), kernel_path)
        outcome = self._run(
            job, kwargs, timeout_s=timeout_s, on_progress=on_progress, cancel=cancel, hide_paths=hidden
        )
        return side, outcome, None

    def summarize_trace(self, path: str, top: int = 15) -> TraceSummary:
        return summarize_trace(path, top)


def summarize_trace(path: str, top: int = 15) -> TraceSummary:
    """Summarize a profiler trace file or logdir in this process (it is data: no child needed).

    Raises trace_summary.TraceFormatError (a ValueError) for missing, empty, corrupt or unknown files.
    """
    from maxkernel.tpu_tools.profile.trace_summary import summarize_trace as _summarize

    p = Path(path).expanduser()
    if p.is_dir() and not (p / "plugins" / "profile").is_dir():
        # a `profile --trace-dir` folder holds one logdir per capture: take the newest capture
        runs = sorted(p.glob("*/plugins/profile/*/"), key=lambda d: d.stat().st_mtime)
        if runs:
            p = runs[-1]
    return _summarize(p, top=top)
