"""measure_interleaved on CPU: a function vs itself is a tie, 4x the work is slower, inputs rotate."""

import jax
import jax.numpy as jnp
import pytest

from maxkernel.tpu_tools.profile.timing import (
    measure_interleaved,
    noise_floor,
    speedup,
    throughput,
    timing_stats,
)

N = 384  # one call of `_work` is ~1-5 ms on a shared 2-core CPU


def _work(x):
    return jnp.tanh(x @ x.T).sum()


def _work_4x(x):
    return sum(jnp.tanh((x + i) @ x.T).sum() for i in range(4))


@pytest.fixture(scope="module")
def inputs():
    return [(jax.random.normal(jax.random.key(i), (N, N), jnp.float32),) for i in range(2)]


@pytest.fixture(scope="module")
def measured(inputs):
    ref, cand = jax.jit(_work), jax.jit(_work_4x)
    fns = {"reference": ref, "reference_repeat": ref, "candidate": cand}
    return measure_interleaved(fns, inputs, warmups=2, reps=30, min_time_s=0.0)


def test_stats_are_consistent(measured):
    for s in measured.values():
        assert s.n == 30 and len(s.samples_ms) == 30
        assert s.timing_source == "wall_clock"
        assert s.min_ms <= s.p25_ms <= s.median_ms <= s.p75_ms
        assert s.ci95_low_ms <= s.median_ms <= s.ci95_high_ms
        assert s.iqr_ms == pytest.approx(s.p75_ms - s.p25_ms)


def test_reference_vs_itself_is_a_tie(measured, inputs):
    # A 95% CI misses 1.0 for identical programs 5% of the time by construction (we saw 3/60), so
    # ask a majority of five independent measurements to contain it: a flake rate near 0.1%.
    ref = jax.jit(_work)
    runs = [measured] + [
        measure_interleaved(
            {"reference": ref, "reference_repeat": ref}, inputs, warmups=1, reps=30, min_time_s=0.0, seed=s
        )
        for s in range(1, 5)
    ]
    ests = [speedup(m["reference"], m["reference_repeat"]) for m in runs]
    assert all(e.paired for e in ests)
    assert sum(e.ci95_low <= 1.0 <= e.ci95_high for e in ests) >= 3, ests
    floor = noise_floor(measured["reference"], measured["reference_repeat"])
    assert floor.rel_spread <= floor.rel_spread_ci95_high


def test_four_times_the_work_is_slower(measured, inputs):
    # Wall clock on a shared 2-core box: another process can swamp one measurement (ci95_high 1.15 at a
    # 0.31 ratio, seen with a test tier beside it). Up to three independent measurements: one must find
    # the slowdown significant, and none may ever call 4x the work faster.
    ref, cand = jax.jit(_work), jax.jit(_work_4x)
    ests = [speedup(measured["reference"], measured["candidate"])]
    for seed in (1, 2):
        if ests[-1].significant and ests[-1].ci95_high < 1.0:
            break
        m = measure_interleaved(
            {"reference": ref, "candidate": cand}, inputs, warmups=1, reps=30, min_time_s=0.0, seed=seed
        )
        ests.append(speedup(m["reference"], m["candidate"]))
    assert any(e.significant and e.ci95_high < 1.0 for e in ests), ests
    assert all(e.ratio < 1.0 and e.ci95_low < 1.0 for e in ests), ests


def test_inputs_rotate_between_reps(inputs):
    seen = []
    jitted = jax.jit(_work)

    def counting(x):
        seen.append(id(x))
        return jitted(x)

    reps = 6
    measure_interleaved({"f": counting}, inputs, warmups=0, reps=reps, min_time_s=0.0)
    timed = seen[-reps:]
    assert len(set(timed)) >= 2
    assert all(a != b for a, b in zip(timed, timed[1:], strict=False))


def test_device_trace_path_matches_schedule(inputs, tmp_path):
    # On CPU the trace path reads host-thread op spans; it checks the execution <-> call matching.
    f = jax.jit(_work)
    out = measure_interleaved(
        {"a": f, "b": f},
        inputs,
        warmups=1,
        reps=4,
        min_time_s=0.0,
        timing_source="device_trace",
        trace_dir=str(tmp_path / "trace"),
    )
    assert all(s.timing_source == "device_trace" and s.n == 4 for s in out.values()), out
    assert list((tmp_path / "trace" / "plugins" / "profile").glob("*/*.xplane.pb"))


def test_rejects_single_input_set(inputs):
    with pytest.raises(ValueError, match=">= 2 distinct input sets"):
        measure_interleaved({"f": jax.jit(_work)}, inputs[:1])


def test_speedup_ci_from_synthetic_samples():
    ref = timing_stats([10.0, 10.2, 9.9, 10.1, 10.0] * 4, "wall_clock")
    fast = timing_stats([5.0, 5.1, 4.9, 5.05, 5.0] * 4, "wall_clock")
    est = speedup(ref, fast)
    assert est.ratio == pytest.approx(2.0, rel=0.02)
    assert 1.9 < est.ci95_low <= est.ratio <= est.ci95_high < 2.1


def test_throughput_and_roofline():
    # 2 GFLOP and 1 GB in 1 ms: 2 TFLOP/s, 1000 GB/s, intensity 2 flop/byte.
    t = throughput(2e9, 1e9, 1.0, peak_flops=100e12, peak_bw=2e12)
    assert t.tflops == pytest.approx(2.0)
    assert t.gbps == pytest.approx(1000.0)
    assert t.roofline_bound == "memory"
    assert t.roofline_fraction == pytest.approx(2e12 / (2 * 2e12))
    assert throughput(None, 1e9, 1.0).tflops is None
