"""`maxkernel bench`: rows for baseline and Pallas reference, a failing variant is one failed row, files written."""

import json

import pytest
from conftest_paths import kernel

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.profile.bench import bench_variant, run_bench


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=120)


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_bench_rmsnorm_baseline_and_pallas_reference(tmp_path, evaluator):
    # the default size: the production size (full); validated at the check sizes, scored at full
    results = run_bench(["12p"], target="tpu-v6e", out_dir=str(tmp_path / "out"), evaluator=evaluator)
    rows = {r.variant: r for r in results.rows}
    assert set(rows) == {"baseline", "pallas_reference"}
    assert all(r.status == "ok" for r in rows.values()), [r.message for r in rows.values()]
    assert results.size == "full" and all(r.size == "full" for r in rows.values())
    assert rows["baseline"].compiler == "mosaic-tpu-aot"
    assert rows["pallas_reference"].validated is True
    assert rows["pallas_reference"].check_sizes == ["small", "derived"]
    # no chip here, and full is no check size: nothing is timed (not even the baseline on CPU), only estimated
    for r in rows.values():
        assert r.median_ms is None and "nothing measured" in r.timing_note, r
        assert r.estimate_us > 0 and r.estimate_tier in ("llo", "model")
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(saved["rows"]) == 2
    assert (tmp_path / "out" / "results.csv").read_text().count("\n") == 3
    # the suite's row shape: one row per task, kernel = the Pallas reference, both times from one tier
    from maxkernel.tpu_tools.profile.scoreboard import read_rows

    (task_row,) = read_rows((tmp_path / "out" / "score.json").read_text())
    assert task_row.task == "12p_RMSNorm" and task_row.correct and task_row.kernel_label == "pallas_reference"
    assert task_row.tier == "estimate"  # the baseline's CPU median is no TPU measurement
    assert task_row.kernel_time_us == rows["pallas_reference"].estimate_us
    assert task_row.baseline_time_us == rows["baseline"].estimate_us
    assert task_row.speedup_vs_baseline == pytest.approx(
        task_row.baseline_time_us / task_row.kernel_time_us, 1e-3
    )
    assert results.score.by_tier["estimate"].rows == 1 and "measured" not in results.score.by_tier


def test_a_broken_variant_is_one_failed_row(evaluator):
    # bad_block slices its (m, k) output to (m, n), right where k >= n (matmul_reference); 8p_GEMM has
    # K=256 < N=896, so the candidate's own jnp add fails to broadcast while it is traced, before its
    # block is lowered: its own Python error (no output to compare a shape with), named with its line.
    row = bench_variant(evaluator, "8p_GEMM", "pallas_reference", kernel("bad_block"), "tpu-v6e", "small", 1)
    assert row.status == "python_error" and row.stage_failed == "compile", row
    assert "incompatible shapes for broadcasting" in row.message and "candidate line" in row.message, (
        row.message
    )
