"""Validation across sizes (judge/sizes.py): compile at the target size first, then every check size.

Each check arrives with the kernel that would fool it (tests/kernels/adversarial/): one written for the
small shape, one right at small with zeros above its rows, one the real compiler rejects.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_paths import PLUS_ONE_REF, REFS, kernel, scratch_outside_tmp

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=180)


def test_a_kernel_hard_coded_to_the_small_shape_is_shape_specialized(evaluator):
    r = evaluator.validate(kernel("adversarial/hardcoded_small_shape"), PLUS_ONE_REF, "tpu-v6e", seeds=1)
    assert r.failure.kind == "shape_specialized", r.failure
    assert r.size == "full" and r.failure.sizes_failed == ["full"] and r.failure.sizes_passed == ["small"]
    assert r.failure.cause_kind == "shape_mismatch"
    # compile at the target first, then compile-only at the check sizes; nothing was interpreted
    assert [(c.size, c.what, c.ok) for c in r.checks] == [
        ("full", "compile", False),
        ("small", "compile", True),
        ("derived", "compile", False),
    ]
    assert "nothing ran" in r.execution and "interpret" not in r.execution


def test_a_kernel_the_compiler_rejects_fails_validate_though_it_interprets(evaluator):
    """Issue 23 item 5: the (8, 128) rule. The verdict is the compile failure, said as what ran."""
    ref = str(REFS / "bf16_rows_reference.py")
    r = evaluator.validate(kernel("adversarial/breaks_tiling_rule"), ref, "tpu-v6e", seeds=1)
    assert not r.ok and r.failure.kind in ("lowering_error", "mosaic_error", "compile_error"), r.failure
    assert [c.what for c in r.checks] == ["compile", "compile", "compile"]  # fails at every size alike
    assert "stopped at" in r.checks[0].detail and "real Mosaic TPU compiler" in r.checks[0].detail
    assert r.per_seed == [] and "nothing ran" in r.execution


def test_zeros_above_the_small_rows_fail_at_the_derived_size_through_plain_validate():
    """`maxkernel validate K -r REF` with default flags: target full, check sizes small + derived."""
    cwd = scratch_outside_tmp("sizes-")
    entry = Path(sys.executable).parent / "maxkernel"
    p = subprocess.run(
        [str(entry), "validate", kernel("adversarial/zeros_above_rows"), "-r", PLUS_ONE_REF, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    assert p.returncode == 1, p.stderr
    r = json.loads(p.stdout)
    assert r["failure"]["kind"] == "shape_specialized", r["failure"]
    assert r["failure"]["cause_kind"] == "output_mismatch"
    assert (r["failure"]["sizes_passed"], r["failure"]["sizes_failed"]) == (["small"], ["derived"])
    assert r["size"] == "full" and [c["name"] for c in r["check_sizes"]] == ["small", "derived"]
    derived = r["check_sizes"][1]["dims"]
    assert derived["rows"] > 16  # the rows grow past small
    assert [(c["size"], c["what"], c["ok"]) for c in r["checks"]] == [
        ("full", "compile", True),
        ("small", "validate", True),
        ("derived", "validate", False),
    ]
    assert "real Mosaic TPU compiler" in r["execution"] and "ran at small, derived" in r["execution"]


def test_an_honest_kernel_passes_every_size(evaluator):
    r = evaluator.validate(kernel("good_dma"), PLUS_ONE_REF, "tpu-v6e", seeds=1)
    assert r.ok, r.failure
    assert [(c.size, c.what) for c in r.checks] == [
        ("full", "compile"),
        ("small", "validate"),
        ("derived", "validate"),
    ]
