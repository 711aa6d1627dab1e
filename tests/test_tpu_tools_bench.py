"""`maxkernel bench`: rows for baseline and Pallas reference, a failing variant is one failed row, files written."""

import json

import pytest
from conftest_paths import kernel

from maxkernel.tpu_tools.bench import bench_variant, run_bench
from maxkernel.tpu_tools.evaluate import Evaluator
from maxkernel.tpu_tools.pool import WorkerPool


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=120)


def test_bench_rmsnorm_baseline_and_pallas_reference(tmp_path, evaluator):
    results = run_bench(
        ["12p"], target="tpu-v6e", size="small", out_dir=str(tmp_path / "out"), evaluator=evaluator
    )
    rows = {r.variant: r for r in results.rows}
    assert set(rows) == {"baseline", "pallas_reference"}
    assert all(r.status == "ok" for r in rows.values()), [r.message for r in rows.values()]
    assert rows["baseline"].median_ms > 0 and rows["baseline"].compiler == "mosaic-tpu-aot"
    assert rows["pallas_reference"].validated is True
    # no chip here: the Pallas kernel is not timed, only estimated
    assert (
        rows["pallas_reference"].median_ms is None and "not measured" in rows["pallas_reference"].timing_note
    )
    assert rows["pallas_reference"].estimate_us > 0
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(saved["rows"]) == 2
    assert (tmp_path / "out" / "results.csv").read_text().count("\n") == 3


def test_a_broken_variant_is_one_failed_row(evaluator):
    row = bench_variant(evaluator, "8p_GEMM", "pallas_reference", kernel("bad_block"), "tpu-v6e", "small", 1)
    assert row.status == "shape_mismatch" and row.stage_failed == "compile" and row.message
