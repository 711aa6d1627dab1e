"""Where a verdict's time goes (judge side): every child job with its seconds, and the steps inside it.

The parent's clock does the timing: a `JobClock` stamps each progress line a child sends as it arrives,
and a step lasts from its line to the next one (the last, to the child's end); the time before the first
line is the child's start (fork, sandbox, imports, setup). Only the compile child's trace/lower/compile
split is its own clock (`StageTimes`), said as such. Phases explain latency; no verdict reads them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from maxkernel.tpu_tools.judged.integrity import PROGRESS_PREFIX
from maxkernel.tpu_tools.reports import Phase, StageTimes

# progress lines the judged child sends (candidate_run.py) and the reference child sends (validate.py);
# spelled here, not imported: the judge side never imports the candidate's child
CANDIDATE_LOAD = "candidate: load"
CANDIDATE_TRACE = "candidate: trace"
CANDIDATE_COMPILE = "candidate: compile"
_CANDIDATE_RUN = re.compile(r"^candidate run (?P<call>\d+)/\d+ \(seed (?P<seed>-?\d+)\)")
_REFERENCE_SEED = re.compile(r"^reference seed (?P<seed>-?\d+)(?P<rest>.*)$")


def _step(line: str, interpreted: bool) -> tuple[str, int | None, int | None]:
    """(step, seed, call) of one progress line."""
    if line == CANDIDATE_LOAD:
        return "load", None, None
    if line == CANDIDATE_TRACE:
        return "trace", None, None
    if line == CANDIDATE_COMPILE:
        return ("interpret_compile" if interpreted else "compile"), None, None
    if m := _CANDIDATE_RUN.match(line):
        return "run", int(m["seed"]), int(m["call"])
    if m := _REFERENCE_SEED.match(line):
        rest = m["rest"]
        step = "oracle" if "oracle" in rest else "ulp_nudge" if "ulp" in rest else "reference_run"
        return step, int(m["seed"]), None
    if line.startswith("reference calibration"):
        return "calibration", None, None
    return line[:80], None, None


class JobClock:
    """The parent's clock on one child job: started at submit, a stamp per progress line, stopped at
    its end. Wraps the caller's progress callback, which still gets every line."""

    def __init__(self, forward: Callable[[str], None] | None = None) -> None:
        self.forward = forward
        self.started = time.perf_counter()
        self.marks: list[tuple[float, str]] = []
        self.ended: float | None = None

    def __call__(self, line: str) -> None:
        if not line.startswith(PROGRESS_PREFIX):  # integrity events are evidence, not steps
            self.marks.append((time.perf_counter(), line))
        if self.forward is not None:
            self.forward(line)

    def stop(self) -> None:
        self.ended = time.perf_counter()

    def phases(self, job: str, size: str | None, *, interpreted: bool = True) -> list[Phase]:
        """The whole job, then its steps: start, and one per progress line."""
        end = self.ended if self.ended is not None else time.perf_counter()
        out = [Phase(job=job, size=size, seconds=_s(end - self.started))]  # type: ignore[arg-type]
        edges = [(self.started, "")] + self.marks + [(end, "")]
        for (t0, line), (t1, _) in zip(edges, edges[1:], strict=False):
            step, seed, call = _step(line, interpreted) if line else ("start", None, None)
            if t1 - t0 <= 0 and step == "start":
                continue
            out.append(Phase(job=job, step=step, size=size, seed=seed, call=call, seconds=_s(t1 - t0)))  # type: ignore[arg-type]
        return out


def compile_phases(wall_s: float, times: StageTimes, size: str | None) -> list[Phase]:
    """The compile child's wall (the parent's clock) and its own trace/lower/compile split."""
    out = [Phase(job="compile", size=size, seconds=_s(wall_s))]
    for step, ms in (("trace", times.trace_ms), ("lower", times.lower_ms), ("compile", times.compile_ms)):
        if ms is not None:
            out.append(Phase(job="compile", step=step, size=size, seconds=_s(ms / 1e3), timed_by="child"))
    return out


def timed(job: str, size: str | None, seconds: float) -> Phase:
    """A step with no child: this process's own (the comparison, a reference-side child as a whole)."""
    return Phase(job=job, size=size, seconds=_s(seconds))  # type: ignore[arg-type]


def _s(seconds: float) -> float:
    return round(max(0.0, seconds), 4)
