"""The parent's checks on what a timed child reported (judge side: pure functions over numbers, no jax).

A timed child's samples come from a process that may be running candidate code, so none of them is
taken on trust:

- `clock_check`: the parent timestamps each delivery of a timed set and each `done` it receives. A
  child's claimed call time must fit inside that window, and what is left over (loading, saving,
  messaging) must look like the reference child's left-over for the same sets. The smallest left-over
  over all calls is compared (scheduling noise only ever adds to it; a slow clock shifts every call).
  A patched clock, or a child that announces `done` early and computes later, leaves more than
  `CLOCK_ABS_TOL_MS` + `CLOCK_REL_TOL` of the shortest window unexplained, plus `CLOCK_NOISE_SPREADS`
  times the box's own noise: how far the reference's typical left-over sits above its smallest. On a
  quiet box that term is near zero; on a loaded one an honest child's smallest left-over drifts up with
  it, and an accusation of tampering must not rest on the scheduler.
- `device_check`: on a chip, device time from the profiler trace must fit inside host wall time, call
  by call, and inside the parent's window.
- `plausibility`: no time may beat the roofline of the reference's flops and bytes on the measured
  chip (`IMPLAUSIBLE_FRACTION` of it, leaving room for a kernel that legitimately skips work).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

CLOCK_ABS_TOL_MS = 3.0
CLOCK_REL_TOL = 0.25
CLOCK_NOISE_SPREADS = 1.0
CLOCK_OVERSHOOT_TOL_MS = 0.5
DEVICE_OVER_WALL_TOL_MS = 0.01
IMPLAUSIBLE_FRACTION = 0.5


class ClockCheck(BaseModel):
    """The candidate child's own clock against the parent's timestamps."""

    calls: int
    child_total_ms: float = Field(description="sum of the child's per-call times")
    parent_window_ms: float = Field(description="sum over calls of delivery -> done, on the parent's clock")
    overhead_min_ms: float = Field(description="smallest (parent window - child time) over the calls")
    reference_overhead_min_ms: float | None = Field(
        description="the same for the reference children on the same sets: the expected load/save/pipe cost"
    )
    unexplained_ms: float = Field(description="candidate's smallest left-over beyond the reference's")
    noise_ms: float = Field(
        0.0, description="the reference's median left-over minus its smallest: the box's scheduling noise"
    )
    tolerance_ms: float = Field(
        description=f"{CLOCK_ABS_TOL_MS} ms + {CLOCK_REL_TOL:.0%} of the shortest window "
        f"+ {CLOCK_NOISE_SPREADS:g} x noise_ms"
    )
    overshoot_calls: int = Field(description="calls the child says took longer than the parent's window")
    agrees: bool
    note: str = ""


class DeviceCheck(BaseModel):
    calls: int
    device_total_ms: float
    wall_total_ms: float
    over_wall_calls: int = Field(description="calls whose device time exceeds their wall time")
    agrees: bool
    note: str = ""


class Plausibility(BaseModel):
    """Whether a measured time respects the physical limit of the chip it ran on."""

    chip: str | None
    roofline_ms: float | None = Field(description="max(flops / peak flop/s, bytes / HBM bandwidth)")
    flops: float | None
    bytes_accessed: float | None
    measured_ms: float | None
    plausible: bool
    note: str


def _windows(deliver: dict[int, float], done: dict[int, float], n: int) -> list[float] | None:
    if any(i not in deliver or i not in done for i in range(n)):
        return None
    return [(done[i] - deliver[i]) * 1e3 for i in range(n)]


def clock_check(
    child_ms: list[float],
    deliver: dict[int, float],
    done: dict[int, float],
    reference_overheads_ms: list[float] | None,
) -> ClockCheck:
    """Compare a child's per-call claims with the parent's delivery -> done windows (seconds in, ms out)."""
    n = len(child_ms)
    windows = _windows(deliver, done, n)
    if windows is None or n == 0:
        return ClockCheck(
            calls=n,
            child_total_ms=sum(child_ms),
            parent_window_ms=0.0,
            overhead_min_ms=0.0,
            reference_overhead_min_ms=None,
            unexplained_ms=0.0,
            tolerance_ms=0.0,
            overshoot_calls=0,
            agrees=False,
            note=f"the parent saw {len(done)} of {n} timed calls end: the child's timings are unverifiable",
        )
    overheads = [w - c for w, c in zip(windows, child_ms, strict=True)]
    overhead = min(overheads)
    ref = min(reference_overheads_ms) if reference_overheads_ms else None
    unexplained = overhead - (ref if ref is not None else 0.0)
    noise = 0.0
    if reference_overheads_ms and len(reference_overheads_ms) >= 3:
        ordered = sorted(reference_overheads_ms)
        noise = ordered[len(ordered) // 2] - ordered[0]
    tol = CLOCK_ABS_TOL_MS + CLOCK_REL_TOL * min(windows) + CLOCK_NOISE_SPREADS * noise
    overshoot = sum(1 for o in overheads if o < -CLOCK_OVERSHOOT_TOL_MS)
    agrees = unexplained <= tol and overshoot == 0
    note = ""
    if overshoot:
        note = f"{overshoot} call(s) claim more time than the parent's window allows"
    elif not agrees:
        note = (
            f"the child's clock leaves {unexplained:.3g} ms per call unexplained (tolerance {tol:.3g} ms): "
            "its clock runs slow, or it announced calls done before computing them"
        )
    return ClockCheck(
        calls=n,
        child_total_ms=sum(child_ms),
        parent_window_ms=sum(windows),
        overhead_min_ms=overhead,
        reference_overhead_min_ms=ref,
        unexplained_ms=unexplained,
        noise_ms=noise,
        tolerance_ms=tol,
        overshoot_calls=overshoot,
        agrees=agrees,
        note=note,
    )


def overheads(child_ms: list[float], deliver: dict[int, float], done: dict[int, float]) -> list[float] | None:
    windows = _windows(deliver, done, len(child_ms))
    return None if windows is None else [w - c for w, c in zip(windows, child_ms, strict=True)]


def device_check(device_ms: list[float], wall_ms: list[float], parent_window_ms: float | None) -> DeviceCheck:
    """Device time per call (profiler trace) must fit inside host wall time, and all of it in the parent's window."""
    n = len(device_ms)
    over = sum(1 for d, w in zip(device_ms, wall_ms, strict=False) if d > w + DEVICE_OVER_WALL_TOL_MS)
    dev, wall = sum(device_ms), sum(wall_ms)
    notes = []
    if n != len(wall_ms):
        notes.append(f"{n} device samples for {len(wall_ms)} timed calls")
    if over:
        notes.append(f"{over} call(s) took longer on the device than on the host clock around them")
    if parent_window_ms is not None and dev > parent_window_ms + DEVICE_OVER_WALL_TOL_MS:
        notes.append(f"device time {dev:.4g} ms exceeds the parent's window {parent_window_ms:.4g} ms")
    return DeviceCheck(
        calls=n,
        device_total_ms=dev,
        wall_total_ms=wall,
        over_wall_calls=over,
        agrees=not notes,
        note="; ".join(notes),
    )


def plausibility(
    measured_ms: float | None,
    flops: float | None,
    bytes_accessed: float | None,
    peak_flops_per_s: float | None,
    peak_bytes_per_s: float | None,
    chip: str | None,
) -> Plausibility:
    """A time under IMPLAUSIBLE_FRACTION of the roofline of the reference's work on this chip is implausible."""
    bounds = []
    if flops and peak_flops_per_s:
        bounds.append(flops / peak_flops_per_s)
    if bytes_accessed and peak_bytes_per_s:
        bounds.append(bytes_accessed / peak_bytes_per_s)
    if chip is None or not bounds or measured_ms is None:
        why = "no chip peaks for this device" if chip is None else "no flops or bytes to bound the time"
        return Plausibility(
            chip=chip,
            roofline_ms=None,
            flops=flops,
            bytes_accessed=bytes_accessed,
            measured_ms=measured_ms,
            plausible=True,
            note=f"not checked: {why}",
        )
    roof_ms = max(bounds) * 1e3
    ok = measured_ms >= IMPLAUSIBLE_FRACTION * roof_ms
    note = (
        f"{measured_ms:.4g} ms vs the {chip} roofline {roof_ms:.4g} ms"
        if ok
        else f"{measured_ms:.4g} ms beats {IMPLAUSIBLE_FRACTION:.0%} of the {chip} roofline of the reference's "
        f"work ({roof_ms:.4g} ms): physically impossible, so the measurement is not evidence"
    )
    return Plausibility(
        chip=chip,
        roofline_ms=roof_ms,
        flops=flops,
        bytes_accessed=bytes_accessed,
        measured_ms=measured_ms,
        plausible=ok,
        note=note,
    )
