"""The judge's timing loop, as it runs inside a timed child (the reference's or the candidate's process).

Both sides run this same loop, so the parent can compare like with like. The child announces
`timing:ready n` when it has warmed up; only then does the parent deliver timed set 0 into the
child's scratch folder, and set i+1 only after the child announced `timing:done i`. Each timed call
is therefore the first call on an input set nobody in that process has seen before: an input-keyed
cache never hits, and no later set exists anywhere the process can reach while an earlier one runs.
The outputs of every timed call are written beside its inputs before `done` is sent; the parent
compares them with the reference's (see profile.py) in a process that never runs candidate code.

The clock is the `time.perf_counter` this module bound when it was imported, before any candidate
code; `clock_fingerprints` lets the caller prove afterwards that neither it nor `time.perf_counter`,
`jax.block_until_ready` or the progress pipe were swapped. The parent does not trust these samples
anyway: it timestamps every delivery and every `done` itself (timing_checks.py).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.estimate import StaticEstimate
from maxkernel.tpu_tools.pool import handover
from maxkernel.tpu_tools.pool.child import report_progress
from maxkernel.tpu_tools.profile import trace_summary
from maxkernel.tpu_tools.profile.trace_summary import TraceSummary
from maxkernel.tpu_tools.reports import ArraySpec, Environment, Failure

_clock = time.perf_counter  # bound before any candidate code is imported
_sleep = time.sleep
READY = "timing:ready"
DONE = "timing:done"
INPUTS = "inputs"
OUTPUTS = "outputs"
POLL_S = 0.0002
WAIT_LIMIT_S = 120.0


class DeliveryTimeout(RuntimeError):
    """The parent never delivered the next timed set (it died, or gave up on this child)."""


def set_dir(scratch: str | Path, i: int) -> Path:
    return Path(scratch) / f"timed_{i}"


def to_numpy(tree) -> list:
    import jax
    import numpy as np

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def _wait_for(path: Path) -> None:
    deadline = _clock() + WAIT_LIMIT_S
    while not path.exists():
        if _clock() > deadline:
            raise DeliveryTimeout(f"no timed input set arrived at {path.name} within {WAIT_LIMIT_S:.0f} s")
        _sleep(POLL_S)


def output_leaves_are_arrays(out) -> bool:
    """Every output leaf is a concrete jax array (an object with its own block_until_ready could lie)."""
    import jax
    from jax._src.array import ArrayImpl

    return all(type(x) is ArrayImpl for x in jax.tree_util.tree_leaves(out))


def run_timed_calls(fn: Callable, scratch: str | Path, n: int, input_specs: list[ArraySpec]) -> list[float]:
    """Time `fn` once on each of n delivered sets; returns wall ms per call (this process's clock)."""
    import jax

    report_progress(f"{READY} {n}")
    samples: list[float] = []
    for i in range(n):
        folder = set_dir(scratch, i)
        _wait_for(folder / f"{INPUTS}.json")
        args = jax.block_until_ready(
            handover.as_jax(handover.load_arrays(folder, INPUTS, expect=input_specs))
        )
        t0 = _clock()
        out = fn(*args)
        jax.block_until_ready(out)
        dt = _clock() - t0
        if not output_leaves_are_arrays(out):
            raise TypeError("the timed call returned something other than jax arrays")
        samples.append(dt * 1e3)
        handover.save_arrays(folder, OUTPUTS, to_numpy(out))
        report_progress(f"{DONE} {i}")
    return samples


def clock_fingerprints() -> dict[str, str]:
    """Identity + code of the functions the timing relies on; compare before and after candidate code ran."""
    import hashlib

    import jax
    from jax._src.array import ArrayImpl

    from maxkernel.tpu_tools.pool import child as pool_child

    this = __import__(__name__, fromlist=["_clock"])
    watched = {
        "time.perf_counter": time.perf_counter,
        "time.monotonic": time.monotonic,
        "timed_loop._clock": this._clock,
        "timed_loop.run_timed_calls": this.run_timed_calls,
        "jax.block_until_ready": jax.block_until_ready,
        "ArrayImpl.block_until_ready": ArrayImpl.block_until_ready,
        "pool_child.report_progress": pool_child.report_progress,
        "timed_loop.report_progress": this.report_progress,
        "handover.save_arrays": handover.save_arrays,
        "handover.load_arrays": handover.load_arrays,
    }
    out = {}
    for name, obj in watched.items():
        code = getattr(obj, "__code__", None)
        body = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16] if code else "-"
        out[name] = f"{id(obj):x}:{body}"
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before if after.get(k) != before[k])


WARMUP_SETS = 2


class TimedSide(BaseModel):
    """What one timed child reports (reference or candidate). The parent checks it; it trusts none of it."""

    samples_ms: list[float] = Field(
        default_factory=list, description="wall ms per timed call, this child's clock"
    )
    device_samples_ms: list[float] | None = Field(
        default=None, description="device ms per timed call from a profiler trace (TPU/GPU), else None"
    )
    device_note: str = ""
    measured_on: str = ""
    environment: Environment | None = None
    trace_path: str | None = None
    trace_summary: TraceSummary | None = None
    warnings: list[str] = []


def _named(fn, name: str):
    def call(*args):
        return fn(*args)

    call.__name__ = call.__qualname__ = name
    return call


def warm_up(fn, sets: list, warmups: int, min_time_s: float) -> None:
    """By count and by time: a cold process's first calls run slow (thread pools, caches, clocks)."""
    import jax

    clock = _clock
    for args in sets:  # compile + first touch of every warm-up set
        jax.block_until_ready(fn(*args))
    w, started = 0, clock()
    while w < warmups or clock() - started < min_time_s:
        jax.block_until_ready(fn(*sets[w % len(sets)]))
        w += 1
        if w >= 10 * max(warmups, 1) + 100:
            break


@contextlib.contextmanager
def profiler(logdir: str | Path, pause: Pause = contextlib.nullcontext):
    """jax.profiler.trace, started and stopped under `pause` (the candidate's guard ignores our own tracer)."""
    import jax

    with pause():
        jax.profiler.start_trace(str(logdir))
    try:
        yield
    finally:
        with pause():
            jax.profiler.stop_trace()


@contextlib.contextmanager
def device_trace(enabled: bool, pause: Pause = contextlib.nullcontext):
    """A profiler capture around the timed loop where the backend has device time (TPU/GPU)."""
    if not enabled:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="maxkernel-timing-") as tmp:
        with profiler(tmp, pause):
            yield Path(tmp)


def device_samples(trace_dir: Path | None, module: str, n: int) -> tuple[list[float] | None, str]:
    """Device ms of each execution of `module` in the capture, in order; None (and why) if unusable."""

    if trace_dir is None:
        return None, ""
    try:
        events, _, _ = trace_summary.load_events(trace_dir)
    except trace_summary.TraceFormatError as e:
        return None, f"device trace unreadable ({e}); wall clock used"
    return device_samples_from_executions(trace_summary.module_executions(events), module, n)


def capture_trace(
    fn,
    sets: list,
    logdir: str | None,
    top: int,
    side: TimedSide,
    calls: int = 2,
    pause: Pause = contextlib.nullcontext,
) -> None:
    """A short trace of `fn` (evidence, not timing) into `logdir`, summarized."""
    import jax

    from maxkernel.tpu_tools.profile.trace_summary import (
        TraceFormatError,
        resolve_trace_file,
        summarize_trace,
    )

    if not logdir:
        return
    try:
        Path(logdir).mkdir(parents=True, exist_ok=True)
        with profiler(logdir, pause):
            for i in range(calls):
                jax.block_until_ready(fn(*sets[i % len(sets)]))
        side.trace_path = str(resolve_trace_file(logdir))
        side.trace_summary = summarize_trace(logdir, top=top)
    except (TraceFormatError, OSError, RuntimeError) as e:
        side.warnings.append(f"no trace summary: {type(e).__name__}: {e}")


def _timed_with_device(
    fn,
    module: str,
    scratch: str,
    n: int,
    specs: list[ArraySpec],
    side: TimedSide,
    pause: Pause = contextlib.nullcontext,
) -> None:
    import jax

    with device_trace(jax.default_backend() in ("tpu", "gpu"), pause) as tdir:
        side.samples_ms = run_timed_calls(fn, scratch, n, specs)
        side.device_samples_ms, side.device_note = device_samples(tdir, module, n) if tdir else (None, "")


def _describe_device(side: TimedSide) -> None:
    import jax

    from maxkernel.tpu_tools.hardware.env_info import environment

    device = jax.devices()[0]
    side.measured_on = f"{device.platform} ({device.device_kind})"
    with contextlib.suppress(Exception):
        side.environment = environment()


def device_samples_from_executions(
    executions: list[tuple[str, float, float]], module: str, n: int
) -> tuple[list[float] | None, str]:
    """Device ms of each execution of `module` (trace_summary.module_executions rows: name, start_us, dur_us)."""
    durs = [d / 1e3 for m, _, d in executions if m == module]
    if len(durs) != n:
        return None, f"trace has {len(durs)} executions of {module}, expected {n}; wall clock used"
    return durs, ""


Pause = Callable[[], contextlib.AbstractContextManager]


class CandidateSide(TimedSide):
    failure: Failure | None = None
    kernel_sha256: str | None = None
    execution: str = ""
    has_pallas_call: bool | None = None
    candidate_execution: Literal["native", "interpret"] | None = None
    not_measured_reason: str | None = None
    static_estimate: StaticEstimate | None = None
    xla_flops: float | None = Field(
        default=None, description="XLA cost analysis of the candidate (evidence only)"
    )
    tampered: list[str] = Field(
        default_factory=list, description="judge functions changed while the candidate ran"
    )
    reached: str | None = Field(default=None, description="hidden reference paths the candidate touched")
