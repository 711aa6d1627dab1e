"""Measured timing that can be trusted: interleaved reps, rotated inputs, medians with bootstrap CIs.

A speedup claim is only as good as its noise floor. So: compile and warm-up are excluded; the
functions are timed round-robin in a per-rep shuffled order (fixed seed) so drift hits all of them
alike; inputs rotate between reps so nothing can cache a result; every sample blocks on the output.
Time the reference twice ("reference" and "reference_repeat") and `noise_floor` tells how far two
identical programs differ here, which is the smallest speedup worth reporting.

Device time comes from a profiler trace where the backend gives one (TPU/GPU; that path is untested on
a device here); otherwise samples are wall clock. Every result says which in `timing_source`.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import jax
import numpy as np
from pydantic import BaseModel, Field

from maxkernel.tpu_tools.profile import trace_summary

TimingSource = Literal["device_trace", "wall_clock"]
_BOOTSTRAP_RESAMPLES = 2000
# Two processes running the same program differ by more than two reps in one process do: on a 2-core
# shared box, honest candidate-vs-reference ties across processes measured 0.91-1.14x at 30 reps (and
# 1.5x once at 5). Speedups inside this band are not significant, whatever the bootstrap says.
PROCESS_SPREAD_FLOOR = 0.15
_SEED = 0


class TimingStats(BaseModel):
    n: int
    median_ms: float
    mean_ms: float
    min_ms: float
    p25_ms: float
    p75_ms: float
    iqr_ms: float
    ci95_low_ms: float = Field(description="bootstrap 95% CI of the median, low end")
    ci95_high_ms: float
    cv: float = Field(description="std / mean of the samples")
    timing_source: TimingSource
    note: str = ""
    samples_ms: list[float] = Field(description="in rep order; equal-length stats are paired by rep")


class SpeedupEstimate(BaseModel):
    ratio: float = Field(description="ref median / candidate median; > 1 means the candidate is faster")
    ci95_low: float
    ci95_high: float
    significant: bool = Field(description="the 95% CI excludes 1.0")
    paired: bool = Field(description="bootstrap resampled reps jointly (interleaved samples)")
    timing_source: str
    noise_widened: bool = Field(
        default=False,
        description="the CI was widened by the noise floor (reference vs itself in another process)",
    )
    raw_ci95_low: float | None = Field(default=None, description="the bootstrap CI before widening")
    raw_ci95_high: float | None = None


class NoiseFloor(BaseModel):
    ratio: float = Field(description="reference / reference_repeat medians")
    ci95_low: float
    ci95_high: float
    rel_spread: float = Field(description="|1 - ratio|")
    rel_spread_ci95_high: float = Field(description="largest |1 - r| over the ratio's 95% CI")


class Throughput(BaseModel):
    tflops: float | None
    gbps: float | None = Field(description="GB/s, 1e9 bytes/s")
    arithmetic_intensity: float | None = Field(description="flops per byte")
    roofline_bound: Literal["compute", "memory"] | None
    roofline_fraction: float | None = Field(description="achieved flop/s over min(peak, AI * bw)")


def timing_stats(samples_ms: list[float], timing_source: TimingSource, note: str = "") -> TimingStats:
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    p25, med, p75 = np.percentile(x, [25, 50, 75])
    rng = np.random.default_rng(_SEED)
    boot = np.median(x[rng.integers(0, x.size, size=(_BOOTSTRAP_RESAMPLES, x.size))], axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    mean = float(x.mean())
    return TimingStats(
        n=int(x.size),
        median_ms=float(med),
        mean_ms=mean,
        min_ms=float(x.min()),
        p25_ms=float(p25),
        p75_ms=float(p75),
        iqr_ms=float(p75 - p25),
        ci95_low_ms=float(lo),
        ci95_high_ms=float(hi),
        cv=float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0,
        timing_source=timing_source,
        note=note,
        samples_ms=[float(v) for v in x],
    )


def _ratio_ci(num: TimingStats, den: TimingStats) -> tuple[float, float, float, bool]:
    a, b = np.asarray(num.samples_ms), np.asarray(den.samples_ms)
    rng = np.random.default_rng(_SEED)
    paired = a.size == b.size
    ia = rng.integers(0, a.size, size=(_BOOTSTRAP_RESAMPLES, a.size))
    ib = ia if paired else rng.integers(0, b.size, size=(_BOOTSTRAP_RESAMPLES, b.size))
    boot = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(np.median(a) / np.median(b)), float(lo), float(hi), paired


def speedup(ref: TimingStats, cand: TimingStats, noise: NoiseFloor | None = None) -> SpeedupEstimate:
    """Ratio of medians ref/cand with a bootstrap 95% CI (paired by rep when both have n reps).

    With `noise` (the reference timed in two processes) the CI is widened on each side by the factor
    the two reference processes differ by, and at least by PROCESS_SPREAD_FLOOR, so an offset between
    processes is never read as a speedup.
    """
    ratio, lo, hi, paired = _ratio_ci(ref, cand)
    src = ref.timing_source if ref.timing_source == cand.timing_source else "mixed"
    raw_lo, raw_hi = lo, hi
    if noise is not None and noise.ratio > 0:
        factor = max(noise.ratio, 1.0 / noise.ratio, 1.0 + PROCESS_SPREAD_FLOOR)
        lo, hi = lo / factor, hi * factor
    return SpeedupEstimate(
        ratio=ratio,
        ci95_low=lo,
        ci95_high=hi,
        significant=not lo <= 1.0 <= hi,
        paired=paired,
        timing_source=src,
        noise_widened=noise is not None,
        raw_ci95_low=raw_lo if noise is not None else None,
        raw_ci95_high=raw_hi if noise is not None else None,
    )


def noise_floor(ref: TimingStats, ref_repeat: TimingStats) -> NoiseFloor:
    """How far two measurements of the same program differ: the smallest speedup worth reporting."""
    ratio, lo, hi, _ = _ratio_ci(ref, ref_repeat)
    return NoiseFloor(
        ratio=ratio,
        ci95_low=lo,
        ci95_high=hi,
        rel_spread=abs(1.0 - ratio),
        rel_spread_ci95_high=max(abs(1.0 - lo), abs(1.0 - hi)),
    )


def throughput(
    flops: float | None,
    bytes_accessed: float | None,
    median_ms: float,
    peak_flops: float | None = None,
    peak_bw: float | None = None,
) -> Throughput:
    """Achieved TFLOP/s and GB/s; with peaks (flop/s, bytes/s, e.g. ChipSpec) the roofline fraction."""
    if median_ms <= 0:
        raise ValueError(f"median_ms must be > 0, got {median_ms}")
    s = median_ms / 1e3
    fps = flops / s if flops else None
    bps = bytes_accessed / s if bytes_accessed else None
    ai = flops / bytes_accessed if flops and bytes_accessed else None
    bound = frac = None
    if fps is not None and ai is not None and peak_flops and peak_bw:
        attainable = min(peak_flops, ai * peak_bw)
        bound = "compute" if peak_flops <= ai * peak_bw else "memory"
        frac = fps / attainable
    elif fps is not None and peak_flops:
        bound, frac = "compute", fps / peak_flops
    elif bps is not None and peak_bw:
        bound, frac = "memory", bps / peak_bw
    return Throughput(
        tflops=fps / 1e12 if fps is not None else None,
        gbps=bps / 1e9 if bps is not None else None,
        arithmetic_intensity=ai,
        roofline_bound=bound,
        roofline_fraction=frac,
    )


def _module_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "fn")
    return f"jit_{name}"


def _device_samples(
    trace_dir: Path, schedule: list[str], fns: dict[str, Callable]
) -> tuple[dict[str, list[float]] | None, str]:
    """Per-key device times from the trace, matched to the call schedule by execution order."""
    try:
        events, _, _ = trace_summary.load_events(trace_dir)
    except trace_summary.TraceFormatError as e:
        return None, f"device trace unreadable ({e}); wall clock used"
    wanted = {_module_name(f) for f in fns.values()}
    execs = [x for x in trace_summary.module_executions(events) if x[0] in wanted]
    if len(execs) != len(schedule):
        return (
            None,
            f"trace has {len(execs)} executions of {sorted(wanted)}, expected {len(schedule)}; wall clock used",
        )
    out: dict[str, list[float]] = {k: [] for k in fns}
    for key, (module, _, dur_us) in zip(schedule, execs, strict=True):
        if module != _module_name(fns[key]):
            return None, "trace execution order does not match the call schedule; wall clock used"
        out[key].append(dur_us / 1e3)
    return out, ""


def measure_interleaved(
    fns: dict[str, Callable],
    input_sets: list[tuple],
    *,
    warmups: int = 3,
    reps: int = 30,
    min_time_s: float = 0.1,
    max_reps: int | None = None,
    warmup_min_time_s: float = 0.25,
    trace_dir: str | None = None,
    timing_source: Literal["auto", "device_trace", "wall_clock"] = "auto",
    seed: int = _SEED,
) -> dict[str, TimingStats]:
    """Time already-jitted `fns` on rotating `input_sets`, interleaved; one TimingStats per key.

    Warm-up runs at least `warmups` rounds and at least `warmup_min_time_s` seconds.
    Rep r calls every function once, in an order shuffled with `seed`, on input_sets[r % len].
    Reps continue past `reps` until `min_time_s` of samples were taken (at most `max_reps`,
    default 10 * reps). "auto" uses device time from a profiler trace on TPU/GPU and wall clock on
    CPU; "device_trace" forces the trace path (on CPU it reads host-thread op spans). `trace_dir`
    keeps the trace (a capture is made whenever it is given).
    """
    if not fns:
        raise ValueError("no functions to time")
    if len(input_sets) < 2:
        raise ValueError(f"need >= 2 distinct input sets to rotate, got {len(input_sets)}")
    if reps < 1 or warmups < 0:
        raise ValueError(f"reps must be >= 1 and warmups >= 0, got reps={reps} warmups={warmups}")
    max_reps = max_reps or 10 * reps
    input_sets = [tuple(s) for s in jax.block_until_ready(list(input_sets))]
    keys = list(fns)

    for f in fns.values():  # compile + first touch of every input set, not timed
        for args in input_sets:
            jax.block_until_ready(f(*args))
    # Warm up by count and by time: thread pools, caches and clock frequency settle only after a while,
    # and the first measured rep of a cold process otherwise runs measurably slower.
    w, warm_started = 0, time.perf_counter()
    while w < warmups or time.perf_counter() - warm_started < warmup_min_time_s:
        for k in keys:
            jax.block_until_ready(fns[k](*input_sets[w % len(input_sets)]))
        w += 1
        if w >= 10 * max(warmups, 1) + 100:
            break

    use_trace = timing_source == "device_trace" or (
        timing_source == "auto" and jax.default_backend() in ("tpu", "gpu")
    )
    tmp = None
    if use_trace or trace_dir:
        if trace_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="maxkernel_timing_")
            trace_dir = tmp.name
    rng = np.random.default_rng(seed)
    wall: dict[str, list[float]] = {k: [] for k in keys}
    schedule: list[str] = []
    try:
        ctx = jax.profiler.trace(trace_dir) if trace_dir else contextlib.nullcontext()
        with ctx:
            total_s, r = 0.0, 0
            while r < reps or (total_s < min_time_s and r < max_reps):
                args = input_sets[r % len(input_sets)]
                for i in rng.permutation(len(keys)):
                    k = keys[i]
                    t0 = time.perf_counter()
                    jax.block_until_ready(fns[k](*args))
                    dt = time.perf_counter() - t0
                    wall[k].append(dt * 1e3)
                    schedule.append(k)
                    total_s += dt
                r += 1
        note = ""
        if use_trace:
            dev, note = _device_samples(Path(trace_dir), schedule, fns)
            if dev is not None:
                return {k: timing_stats(dev[k], "device_trace") for k in keys}
        elif trace_dir:
            note = "wall clock taken under the profiler (trace kept)"
        return {k: timing_stats(wall[k], "wall_clock", note) for k in keys}
    finally:
        if tmp is not None:
            tmp.cleanup()
