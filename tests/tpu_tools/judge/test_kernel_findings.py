"""Issue 58 item 4: what TPU interpret mode catches in a kernel (a revisited output block, an
out-of-bounds block index) is a negative verdict that names the bug, through the real pool and CLI; the
honest accumulator that revisits its output block in consecutive steps still passes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_paths import PLUS_ONE_REF, REFS, kernel, scratch_outside_tmp

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

GEMM_ROWS_REF = str(REFS / "gemm_rows_reference.py")


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=180)


@pytest.mark.slow
def test_a_gemm_with_a_clamped_output_index_fails_naming_the_revisited_block_through_plain_validate():
    """Right at small (two row blocks, the clamp never bites); at the derived size row block 2 writes
    output block (1, 0) after the grid left it for (1, 1). It was exit 3, interpret_unsupported, with a
    traceback for its message."""
    entry = Path(sys.executable).parent / "maxkernel"
    args = [str(entry), "validate", kernel("adversarial/gemm_clamped_out_rows"), "-r", GEMM_ROWS_REF]
    p = subprocess.run(
        [*args, "--seeds", "1", "--json"],
        capture_output=True,
        text=True,
        cwd=scratch_outside_tmp("findings-"),
        timeout=600,
    )
    assert p.returncode == 1, p.stderr
    f = json.loads(p.stdout)["failure"]
    assert f["kind"] == "shape_specialized" and f["cause_kind"] == "revisited_output_block", f
    assert f["sizes_passed"] == ["small"] and f["sizes_failed"] == ["derived"]
    s = f["summary"]
    assert "output 0 of kernel _kernel (grid (16, 2, 2), gemm_clamped_out_rows.py:" in s
    assert "block [128:256, 0:128] (block index (1, 0)) again at grid step (2, 0, 0)" in s
    assert "left it at step (1, 0, 1) (first visited at step (1, 0, 0))" in s
    assert "interpret_unsupported" not in s and "Traceback" not in s
    assert "Traceback" in f["message"] and "Revisited block" in f["message"]  # the evidence, kept


@pytest.mark.slow
def test_the_same_gemm_revisiting_its_output_block_only_along_k_passes(evaluator):
    """The adversary's honest twin: the accumulator pattern (output block (i, j) held over the k steps,
    the last axis) at the same sizes."""
    r = evaluator.validate(kernel("good_matmul"), GEMM_ROWS_REF, "tpu-v6e", seeds=1)
    assert r.ok, r.failure
    assert [(c.size, c.ok) for c in r.checks if c.what == "validate"] == [("small", True), ("derived", True)]


def test_a_scalar_prefetched_block_index_past_the_array_is_out_of_bounds(evaluator):
    r = evaluator.validate(
        kernel("adversarial/prefetch_block_index_off_by_one"), PLUS_ONE_REF, "tpu-v6e", seeds=1
    )
    assert not r.ok and r.failure.kind == "out_of_bounds", r.failure
    assert r.failure.summary.startswith("input 'x_ref' is given block index (2, 0) at grid step (0,)")
    assert "Out-of-bounds block index" in r.failure.message
