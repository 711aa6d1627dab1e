"""profile cannot be gamed: each timing exploit gets its verdict, each honest twin passes.

Candidate and reference run in separate processes; the timed input sets are fresh, handed over one per
call after warm-up; every timed output is checked; the child's clock is checked against the parent's.
CPU-target plain-JAX kernels are measured natively here, so the exploits are real runs. The parent's
checks on device traces and rooflines cannot run without a chip: they are tested on synthetic data.
"""

from __future__ import annotations

import gzip
import json

import pytest
from conftest_paths import KERNELS, MATMUL_REF, kernel

from maxkernel.tpu_tools.judge.timing_checks import (
    CLOCK_ABS_TOL_MS,
    clock_check,
    device_check,
    plausibility,
)
from maxkernel.tpu_tools.judged import timed_loop
from maxkernel.tpu_tools.judged.timed_loop import device_samples
from maxkernel.tpu_tools.profile.run import _Feeder, _write_from, run_profile
from maxkernel.tpu_tools.profile.timing import noise_floor, speedup, timing_stats

ADV = KERNELS / "adversarial"
FAST = {"reps": 5, "warmups": 1, "warmup_min_time_s": 0.05}


def adv(name: str) -> str:
    return str(ADV / f"{name}.py")


def profile(path: str, target: str = "cpu", **kw):
    return run_profile(path, MATMUL_REF, target, "small", **{**FAST, **kw})


def assert_no_time(r):
    assert not r.ok
    assert "candidate" not in r.measured and not r.candidate_measured
    assert r.speedup is None


# ---- end to end: exploits ------------------------------------------------------------------------


def test_wrong_fast_kernel_gets_no_time():
    r = profile(adv("timing_wrong_fast"))
    assert_no_time(r)
    assert r.failure.kind == "output_mismatch" and r.failure.stage == "timed run", r.failure
    assert "wrong while timed" in r.failure.summary


@pytest.mark.parametrize("name", ["timing_right_on_seen_inputs", "timing_wrong_after_calls"])
def test_kernels_right_only_at_warm_up_are_caught_while_timed(name):
    r = profile(adv(name))
    assert_no_time(r)
    assert r.failure.kind == "output_mismatch" and r.failure.stage == "timed run", r.failure


def test_patched_perf_counter_is_tampered():
    r = profile(adv("timing_patch_perf_counter"))
    assert_no_time(r)
    assert r.failure.kind == "tampered" and "time.perf_counter" in r.failure.summary, r.failure


def test_patched_judge_clock_is_tampered_and_disagrees_with_the_parents_window():
    r = profile(adv("timing_patch_judge_clock"))
    assert_no_time(r)
    assert r.failure.kind == "tampered" and "timed_loop._clock" in r.failure.summary, r.failure
    cc = r.clock_check
    assert cc is not None and not cc.agrees, cc
    assert cc.unexplained_ms > cc.tolerance_ms  # the parent's clock alone would have caught it


def test_heavy_honest_twin_agrees_with_the_parents_clock():
    r = profile(adv("timing_heavy_honest"))
    assert r.ok, r.failure
    assert r.clock_check.agrees and r.timed_outputs_checked == r.input_sets == 5
    assert r.speedup is not None and r.speedup.ratio < 1.0  # 192 dots per call against the reference's one


def test_input_keyed_cache_gets_no_fake_speedup():
    log = ADV / "timing_input_cache.log"  # the kernel logs "hit"/"miss" per call
    log.unlink(missing_ok=True)
    try:
        cached = profile(adv("timing_input_cache"))
        calls = log.read_text().split() if log.exists() else None  # None: the OS sandbox kept it read-only
    finally:
        log.unlink(missing_ok=True)
    assert cached.ok, cached.failure
    assert cached.fresh_inputs and cached.timed_outputs_checked == cached.input_sets == 5
    assert len(set(cached.seeds_timed) | set(cached.seeds_warmup)) == len(cached.seeds_timed) + 2
    # The cache works (it hits while warming up on the two warm-up sets), yet no timed call ever hits:
    # the timed calls are the 5 before the trace's last 2 (on warm-up sets again).
    if calls is not None:
        assert "hit" in calls[:-7] and calls[-7:-2] == ["miss"] * 5 and calls[-2:] == ["hit", "hit"], calls
    assert cached.speedup.ratio < 1.5, cached.speedup


def test_honest_callback_twin_is_timed():
    r = profile(adv("timing_callback_honest"))
    assert r.ok and r.candidate_measured and r.speedup is not None, r.failure
    assert r.timed_outputs_checked == 5 and r.clock_check.agrees


def test_candidate_process_cannot_reach_the_reference():
    r = profile(adv("timing_reach_reference"))
    assert not r.ok and r.failure.kind == "python_error", r.failure
    assert "reference not reachable" in r.failure.summary


def test_nothing_to_read_ahead_near_the_candidates_scratch():
    r = profile(adv("timing_read_ahead"))
    assert not r.ok and r.failure.kind == "python_error", r.failure
    assert "nothing to read ahead" in r.failure.summary, r.failure.summary


def test_under_declared_cost_estimate_does_not_lower_the_static_estimate():
    liar = profile(adv("timing_under_declared_cost"), "tpu-v6e")
    honest = profile(kernel("good_matmul"), "tpu-v6e")
    assert liar.ok and honest.ok, (liar.failure, honest.failure)
    assert liar.static_estimate.estimated_time_us >= 0.999 * honest.static_estimate.estimated_time_us
    assert any("CostEstimate" in w and "ignored" in w for w in liar.warnings), liar.warnings
    assert liar.throughput.flops == honest.throughput.flops == 2 * 256 * 512 * 256  # the reference's


def test_separation_is_recorded():
    r = profile(kernel("plain_jax"))
    assert r.ok, r.failure
    assert len(r.processes) == 4 and r.processes[1].startswith("candidate")
    assert set(r.measured) == {"reference", "reference_repeat", "candidate"}
    assert r.speedup.noise_widened and r.speedup.ci95_low <= r.speedup.raw_ci95_low


# ---- the parent's checks on synthetic data ---------------------------------------------------------


def _windows(child_ms, extra_ms):
    deliver = {i: float(i) for i in range(len(child_ms))}
    done = {i: i + (c + extra_ms) / 1e3 for i, c in enumerate(child_ms)}
    return deliver, done


def test_clock_check_honest_slow_and_overshooting_children():
    true = [20.0] * 6
    ref_over = [1.5] * 6
    assert clock_check(true, *_windows(true, 1.6), ref_over).agrees
    slow = [t * 0.25 for t in true]  # a quarter-speed clock: 15 ms per call unexplained
    deliver, done = _windows(true, 1.6)
    c = clock_check(slow, deliver, done, ref_over)
    assert not c.agrees and c.unexplained_ms > 10 and "unexplained" in c.note
    over = clock_check([30.0] * 6, deliver, done, ref_over)  # claims more than the window
    assert not over.agrees and over.overshoot_calls == 6
    missing = clock_check(true, deliver, {0: done[0]}, ref_over)
    assert not missing.agrees and "unverifiable" in missing.note
    # tiny kernels: scheduling noise on a few calls only ever adds, the minimum stays honest
    tiny = [0.05] * 6
    d2, n2 = _windows(tiny, 1.5)
    n2[3] += 0.030
    assert clock_check(tiny, d2, n2, ref_over).agrees
    assert CLOCK_ABS_TOL_MS > 0


def test_a_loaded_box_widens_the_clock_tolerance_and_a_quiet_one_does_not():
    # an honest 2 ms child on a loaded box: its smallest left-over sits 8 ms above a quiet reference
    # minimum, and the reference's own left-overs show the load (median 6.5 ms above their minimum)
    short = [2.0] * 6
    deliver, done = _windows(short, 9.5)
    loaded_ref = [1.5, 4.0, 7.5, 8.0, 9.0, 12.0]
    c = clock_check(short, deliver, done, loaded_ref)
    assert c.agrees and c.noise_ms == 6.5 and c.tolerance_ms > c.unexplained_ms, c
    quiet = clock_check(short, deliver, done, [1.5, 1.5, 1.6, 1.6, 1.7, 1.5])
    assert not quiet.agrees and quiet.noise_ms < 0.2, quiet  # the same 8 ms is unexplained when quiet
    # a quarter-speed clock on 20 ms calls on the loaded box is still beyond the widened tolerance
    true = [20.0] * 6
    deliver, done = _windows(true, 9.5)
    slow = clock_check([t * 0.25 for t in true], deliver, done, loaded_ref)
    assert not slow.agrees and slow.unexplained_ms > slow.tolerance_ms, slow


def _load_burst(monkeypatch, attempts: int, extra_s: float = 0.2) -> list[str]:
    """The parent's view of the box under a burst of load: each hand-over to the candidate's first `attempts`
    processes is stamped `extra_s` earlier than it happened, as if the parent had stalled that long before
    the child could start (the window grows, the child's honest clock does not)."""
    import maxkernel.tpu_tools.profile.run as run

    seen: list[str] = []

    class Burst(run._Feeder):
        def _hand(self, i: int) -> None:
            super()._hand(i)
            if self.scratch.name == "candidate":
                if i == 0:
                    seen.append("attempt")
                if len(seen) <= attempts:
                    self.deliver[i] -= extra_s

    monkeypatch.setattr(run, "_Feeder", Burst)
    return seen


def test_a_load_burst_on_the_first_timing_is_timed_again_and_only_the_second_counts(monkeypatch):
    seen = _load_burst(monkeypatch, attempts=1)
    r = profile(adv("timing_callback_honest"))
    assert seen == ["attempt", "attempt"]
    first = r.first_clock_check
    assert first is not None and not first.agrees and first.unexplained_ms > 150, first
    assert r.ok and r.clock_check.agrees, (r.failure, r.clock_check)
    assert r.timed_outputs_checked == 5 and any("candidate again" in p for p in r.processes)
    # the reference is timed again beside the second timing: its noise is the box's at that moment
    assert any(p.startswith("reference again (job 5)") for p in r.processes), r.processes


def test_a_clock_that_disagrees_twice_is_tampered_and_says_both(monkeypatch):
    seen = _load_burst(monkeypatch, attempts=2)
    r = profile(adv("timing_callback_honest"))
    assert seen == ["attempt", "attempt"]
    assert_no_time(r)
    assert r.failure.kind == "tampered" and "two fresh processes" in r.failure.summary, r.failure
    assert not r.first_clock_check.agrees and not r.clock_check.agrees


def test_an_agreeing_clock_is_timed_once(monkeypatch):
    seen = _load_burst(monkeypatch, attempts=0)
    r = profile(adv("timing_callback_honest"))
    # without an injected burst a second timing happens only after a real disagreement (load on this box)
    assert r.ok and len(seen) == 1 + (r.first_clock_check is not None), r.failure


def _write_device_trace(path, module: str, durs_us: list[float]):
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "XLA Modules"}},
    ]
    t = 0.0
    for i, d in enumerate(durs_us):
        events.append({"ph": "X", "pid": 1, "tid": 2, "name": f"{module}({100 + i})", "ts": t, "dur": d})
        t += d + 50.0
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_device_trace_is_cross_checked_against_wall_time(tmp_path):
    trace = tmp_path / "t.trace.json.gz"
    _write_device_trace(trace, "jit_candidate", [400.0, 410.0, 405.0])
    dev, note = device_samples(trace, "jit_candidate", 3)
    assert dev == [0.4, 0.41, 0.405] and note == ""
    assert device_samples(trace, "jit_candidate", 4)[0] is None  # a missing execution: no device time
    wall = [0.5, 0.52, 0.5]
    assert device_check(dev, wall, parent_window_ms=5.0).agrees
    forged = device_check([0.9, 0.41, 0.405], wall, parent_window_ms=5.0)  # longer on device than host
    assert not forged.agrees and forged.over_wall_calls == 1
    assert not device_check(dev, wall, parent_window_ms=1.0).agrees  # more device time than the window


def test_beating_the_roofline_is_implausible():
    # 2*4096^3 flops on a 918 TFLOP/s chip take >= 0.15 ms; 0.01 ms is not physics (synthetic peaks).
    flops, peak, bw = 2 * 4096**3, 918e12, 1.6e12
    bad = plausibility(0.01, flops, 3 * 4096 * 4096 * 2, peak, bw, "tpu-v6e")
    assert not bad.plausible and bad.roofline_ms == pytest.approx(flops / peak * 1e3)
    assert plausibility(0.2, flops, 3 * 4096 * 4096 * 2, peak, bw, "tpu-v6e").plausible
    memory_bound = plausibility(0.001, 1e3, 1e9, peak, bw, "tpu-v6e")  # 1 GB cannot move in 1 us
    assert not memory_bound.plausible
    cpu = plausibility(0.001, flops, 1e9, None, None, None)
    assert cpu.plausible and cpu.note.startswith("not checked")


def test_noise_floor_across_processes_widens_the_speedup():
    ref = timing_stats([1.0, 1.02, 0.98, 1.01, 0.99], "wall_clock")
    ref2 = timing_stats([1.2, 1.22, 1.18, 1.21, 1.19], "wall_clock")  # the same program, another process
    cand = timing_stats([0.9, 0.91, 0.89, 0.9, 0.92], "wall_clock")
    raw = speedup(ref, cand)
    assert raw.significant and not raw.noise_widened
    wide = speedup(ref, cand, noise_floor(ref, ref2))
    assert wide.noise_widened and not wide.significant  # a 1.1x gain inside a 1.2x process offset
    assert wide.ci95_low < raw.ci95_low and wide.ci95_high > raw.ci95_high
    # two reference processes that agree still leave the documented floor of process-to-process spread
    assert not speedup(ref, cand, noise_floor(ref, ref)).significant
    assert speedup(
        ref, timing_stats([0.5, 0.51, 0.49, 0.5, 0.5], "wall_clock"), noise_floor(ref, ref)
    ).significant


def test_feeder_flags_protocol_breaches(tmp_path):
    import numpy as np

    private, scratch = tmp_path / "private", tmp_path / "scratch"
    for d in (private, scratch):
        d.mkdir()
    sets = [[np.full((2, 2), i, np.float32)] for i in range(2)]
    feed = _Feeder(_write_from(sets), scratch, private, 2, None)
    feed(f"{timed_loop.DONE} 0")  # before ready
    feed(f"{timed_loop.READY} 2")
    assert (timed_loop.set_dir(scratch, 0) / "inputs.json").exists()
    assert not timed_loop.set_dir(scratch, 1).exists()  # the next set only after this call is done
    feed(f"{timed_loop.DONE} 0")  # no outputs written
    feed(f"{timed_loop.DONE} 5")
    text = " | ".join(feed.breaches)
    assert "out of turn" in text and "before its outputs existed" in text
    assert (timed_loop.set_dir(scratch, 1) / "inputs.json").exists()
    assert not (timed_loop.set_dir(scratch, 0) / "inputs.json").exists()  # one set on disk at a time
    assert list(private.iterdir()) == []  # every hand-over was a rename out of the private folder


def _judged(
    tmp_path, cand_ms: list[float], device_kind: str = "TPU v6 lite", device_ms: list[float] | None = None
):
    """The parent's verdict on synthetic child reports: a TPU reference and a candidate on 4096^3 matmul sets."""
    import numpy as np

    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.judged.timed_loop import CandidateSide, TimedSide
    from maxkernel.tpu_tools.pool import handover
    from maxkernel.tpu_tools.profile.reference_side import ReferenceSide
    from maxkernel.tpu_tools.profile.run import ProfileReport, _judge
    from maxkernel.tpu_tools.reports import ArraySpec, Environment

    n = len(cand_ms)
    out = [np.ones((4, 4), np.float32)]
    cand_dir = tmp_path / "candidate"
    for i in range(n):
        timed_loop.set_dir(cand_dir, i).mkdir(parents=True)
        handover.save_arrays(timed_loop.set_dir(cand_dir, i), timed_loop.OUTPUTS, out)
    env = Environment(jax="0", jaxlib="0", libtpu=None, platform="tpu", device_kind=device_kind)
    spec = [ArraySpec(shape=[4, 4], dtype="float32")]
    ref = ReferenceSide(
        samples_ms=[1.0] * n,
        environment=env,
        input_specs=spec,
        output_specs=spec,
        timed_sets=n,
        flops=2 * 4096**3,
    )
    ref2 = TimedSide(samples_ms=[1.0] * n, environment=env)
    cand = CandidateSide(
        samples_ms=cand_ms, device_samples_ms=device_ms, environment=env, candidate_execution="native"
    )

    class Feed:  # what the parent saw: each call's window = its claim + 1 ms
        def __init__(self, ms):
            self.deliver = {i: float(i) for i in range(n)}
            self.done = {i: i + (m + 1.0) / 1e3 for i, m in enumerate(ms)}
            self.breaches: list[str] = []

    report = ProfileReport(ok=False, target="tpu-v6e", size="full", kernel_path="k.py", fresh_inputs=True)
    report.measured_on = f"tpu ({device_kind})"

    def finish(failure=None):
        report.failure, report.ok = failure, failure is None
        return report

    expected = [out for _ in range(n)]
    return _judge(
        report, finish, ref, ref2, cand, Feed(ref.samples_ms), Feed(ref2.samples_ms), Feed(cand_ms), expected,
        cand_dir, parse_target("tpu-v6e"),
    )  # fmt: skip


def test_a_time_beating_the_chips_roofline_is_implausible_never_a_win(tmp_path):
    # 2*4096^3 flops take >= 0.075 ms on a v6e even at its 1840 TOPS int8 peak (the most generous limit); 0.01 ms is not physics.
    r = _judged(tmp_path, [0.01] * 5)
    assert not r.ok and r.failure.kind == "implausible", r.failure
    assert r.speedup is None and not r.candidate_measured
    assert not r.plausibility.plausible and r.plausibility.roofline_ms == pytest.approx(
        2 * 4096**3 / 1840e12 * 1e3
    )
    honest = _judged(tmp_path / "honest", [0.5] * 5)
    assert honest.ok and honest.plausibility.plausible and honest.speedup.ratio == pytest.approx(2.0)


def test_device_time_longer_than_the_host_clock_around_it_is_tampered(tmp_path):
    ok = _judged(tmp_path, [0.5] * 5, device_ms=[0.45] * 5)
    assert ok.ok and ok.device_check.agrees and ok.measured["candidate"].timing_source == "device_trace"
    forged = _judged(tmp_path / "forged", [0.5] * 5, device_ms=[0.45, 0.45, 0.9, 0.45, 0.45])
    assert not forged.ok and forged.failure.kind == "tampered" and forged.speedup is None
    assert forged.device_check.over_wall_calls == 1
