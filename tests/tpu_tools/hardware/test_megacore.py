"""Megacore: the estimate splits parallel grid axes across v4/v5p's two TensorCores, and nothing else."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from maxkernel.tpu_tools.cost.estimate import estimate_pallas
from maxkernel.tpu_tools.hardware.megacore import (
    core_split,
    cores_per_device,
    interpret_cores,
    parallel_prefix,
)
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls
from tests.tpu_tools.problem.test_pallas_info import matmul


def _calls(semantics=None):
    a = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
    calls = find_pallas_calls(jax.make_jaxpr(lambda x, y: matmul(x, y, 256, 256, 256))(a, a))
    if semantics is not None:
        calls = [c.model_copy(update={"dimension_semantics": semantics}) for c in calls]
    return calls


def test_chip_table_cores():
    assert [cores_per_device(c) for c in ("tpu-v4", "tpu-v5p")] == [2, 2]
    assert [cores_per_device(c) for c in ("tpu-v5e", "tpu-v6e", "tpu-7x", "cpu", None)] == [1, 1, 1, 1, 1]


def test_core_split_arithmetic():
    assert parallel_prefix(("parallel", "arbitrary", "parallel")) == 1
    s = core_split((3, 4, 5), ("parallel", "parallel", "arbitrary"), 2)
    assert (s.cores, s.steps_total, s.steps_per_core, s.split_axes) == (2, 60, 30, 2)
    odd = core_split((3, 5), ("parallel", "arbitrary"), 2)
    assert odd.steps_per_core == 2 * 5  # ceil(3 / 2) rows of 5 steps on the busier core
    assert core_split((8,), ("arbitrary",), 2).split_axes == 0
    assert core_split((8,), ("parallel",), 1).steps_per_core == 8


def test_estimate_splits_on_v5p_not_on_v5e():
    v5e, v5p = estimate_pallas(_calls(), "tpu-v5e"), estimate_pallas(_calls(), "tpu-v5p")
    assert v5e.per_call[0].cores == 1 and v5e.per_call[0].steps_per_core == 512
    assert v5p.per_call[0].cores == 2 and v5p.per_call[0].steps_per_core == 256
    assert any("megacore split" in n for n in v5p.per_call[0].notes)
    # On v5p the same kernel with no parallel axis runs on one core: about twice as slow.
    serial = estimate_pallas(_calls(("arbitrary", "arbitrary", "arbitrary")), "tpu-v5p")
    assert serial.per_call[0].cores == 1
    ratio = serial.estimated_time_us / v5p.estimated_time_us
    assert ratio == pytest.approx(2.0, rel=0.1)
    # On v5e the semantics change nothing.
    v5e_serial = estimate_pallas(_calls(("arbitrary", "arbitrary", "arbitrary")), "tpu-v5e")
    assert v5e_serial.estimated_time_us == pytest.approx(v5e.estimated_time_us)


def test_interpret_threads_only_where_the_target_splits():
    par = [{"dimension_semantics": ("parallel", "arbitrary")}]
    assert interpret_cores("tpu-v5p", par) == 2
    assert interpret_cores("tpu-v6e", par) == 1
    assert interpret_cores("tpu-v5p", [{"dimension_semantics": ("arbitrary",)}]) == 1


# ---- validation: a reduction axis wrongly marked "parallel" fails on a megacore target ---------------
@pytest.fixture(scope="module")
def evaluator():
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=180)


def _validate(evaluator, kernel: str, target: str):
    from conftest_paths import KERNELS, REFS

    return evaluator.validate(
        str(KERNELS / "megacore" / f"{kernel}.py"),
        str(REFS / "column_block_sum_reference.py"),
        target,
        seeds=1,
    )


@pytest.mark.slow
def test_reduction_marked_parallel_fails_on_v5p_and_the_honest_twin_passes(evaluator):
    bad = _validate(evaluator, "reduction_marked_parallel", "tpu-v5p")
    assert not bad.ok and bad.failure.kind in ("race", "output_mismatch"), bad.failure
    assert "one per TensorCore" in bad.execution
    good = _validate(evaluator, "reduction_arbitrary", "tpu-v5p")
    assert good.ok, good.failure
    # On a single-core chip the chip runs the same "parallel" mark in order, but jax's interpreter
    # permutes every parallel axis (a fixed key): whether the order-dependent kernel passes there was
    # the luck of that permutation at each check size (it passed at 8 and 9 steps, not at 32), so
    # nothing is asserted about v6e here; the closing note of session 11 keeps it open.
