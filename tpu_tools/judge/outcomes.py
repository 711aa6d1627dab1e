"""How a pool job ended, as the judge tells it: failures, the sandbox stamp, integrity events, hidden paths.

Shared by every parent-side facade (evaluate, profile, the estimate and analyze calls), so none of
them has to import another to word a child's end the same way.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from maxkernel.tpu_tools.judged.integrity import PROGRESS_PREFIX
from maxkernel.tpu_tools.pool.workers import JobOutcome
from maxkernel.tpu_tools.reports import Failure

R = TypeVar("R", bound=BaseModel)


_STATUS_KIND = {
    "timeout": "timeout",
    "crashed": "crash",
    "oom": "oom",
    "exited": "exited",
    "cancelled": "cancelled",
}


R = TypeVar("R", bound=BaseModel)


def outcome_failure(outcome: JobOutcome, what: str) -> Failure:
    """A child that did not return a report: say exactly how it ended."""
    kind = _STATUS_KIND.get(outcome.status, "internal_error")
    summary = f"{what}: {outcome.message}"
    if kind == "internal_error":
        summary = f"{what} failed inside maxkernel (a bug, please report): {outcome.message}"
    return Failure(kind=kind, summary=summary, message=outcome.detail, stage="run")  # type: ignore[arg-type]


def hide_paths_for(reference: str, kernel_path: str) -> tuple[str, ...]:
    """What the candidate must not see: the reference (its dir for a package/task dir) and the task sources.

    A hidden dir that holds the candidate itself (a JaxBench Pallas reference next to its task) is hidden
    entry by entry instead, all but the candidate's own path.
    """
    paths = []
    ref = Path(reference)
    if ref.exists():
        ref = ref.resolve()
        paths.append(ref.parent if ref.name == "__init__.py" else ref)
    spec = importlib.util.find_spec("maxkernel.jaxbench")
    if spec is not None and spec.submodule_search_locations:
        paths.append(Path(next(iter(spec.submodule_search_locations))).resolve() / "tasks")
    keep = Path(kernel_path).resolve()
    out: list[str] = []

    def add(p: Path) -> None:
        if keep == p or not (keep.is_relative_to(p) and p.is_dir()):
            if keep != p:
                out.append(str(p))
            return
        for child in sorted(p.iterdir()):
            add(child)

    for p in paths:
        add(p)
    return tuple(dict.fromkeys(out))


def integrity_evidence(progress: list[str]) -> Failure | None:
    """The judged child's integrity events, as it streamed them (reached_reference before tampered)."""
    events: dict[str, list[str]] = {"reached_reference": [], "tampered": []}
    for line in progress:
        if line.startswith(PROGRESS_PREFIX):
            kind, _, what = line[len(PROGRESS_PREFIX) :].partition(": ")
            events.setdefault(kind, []).append(what)
    if events["reached_reference"]:
        return Failure(
            kind="reached_reference",
            summary=f"the candidate reached hidden reference paths: {'; '.join(events['reached_reference'][:4])}",
            stage="run",
        )
    if events["tampered"]:
        return Failure(
            kind="tampered",
            summary=f"the candidate tampered with the judge: used {', '.join(sorted(set(events['tampered'])))}",
            stage="run",
        )
    return None


def abs_reference(reference: str) -> str:
    p = Path(reference).expanduser()
    return str(p.resolve()) if p.exists() else reference


UNSANDBOXED_WARNING = "sandbox: none - this evaluation ran unsandboxed ({note})"


def stamp_sandbox(report: R, outcome: JobOutcome) -> R:
    """Every verdict names the sandbox its jobs ran in and the host that judged it, as the pool (not the
    judged job, whose hostname is its own UTS namespace's) saw them."""
    from maxkernel.tpu_tools.hardware.env_info import host_environment, host_name

    info = outcome.sandbox
    if info is None or not hasattr(report, "environment"):
        return report
    if report.environment is None:  # type: ignore[attr-defined]
        report.environment = host_environment()  # type: ignore[attr-defined]
    report.environment.sandbox = info  # type: ignore[attr-defined]
    report.environment.host = host_name()  # type: ignore[attr-defined]
    warnings = getattr(report, "warnings", None)
    if info.tier == "none" and isinstance(warnings, list):
        line = UNSANDBOXED_WARNING.format(note=info.note or "no OS sandbox on this host")
        if line not in warnings:
            warnings.append(line)
    return report


def interpret_limit(failure: Failure, target: str, size: str, passed: list[str], failed: str) -> Failure:
    """An `interpret_unsupported` verdict says what did run: the real compile for the target passed, the
    sizes the interpreter could check, and that on the chip the numbers would be checked natively."""
    ran = f"; at {', '.join(passed)} the interpreter ran it and the numbers matched" if passed else ""
    return failure.model_copy(
        update={
            "summary": (
                f"{failure.summary} (at {failed}). What ran: the real compile for {target} at {size!r} "
                f"passed{ran}; validate on a {target} chip to check the numbers"
            )[:1500],
            "sizes_passed": list(passed),
            "sizes_failed": [failed],
        }
    )
