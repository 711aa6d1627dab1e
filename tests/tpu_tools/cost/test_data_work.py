"""Data-dependent work is costed from the reference's own inputs: a run-time grid axis, prefetch-indexed
blocks, a pl.when on a prefetched count, while loops over page tables. Without the values, the bounds stay
(a ceiling, said so). The adversaries in tests/kernels/adversarial/data_dependent_work.py must be costed at
what they really do: the same estimate as the kernel that writes the same counts into its program."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.tpu_tools.cost import data_work
from maxkernel.tpu_tools.cost.analyze import estimate_one
from maxkernel.tpu_tools.cost.data_work import call_data, small_int_inputs
from maxkernel.tpu_tools.cost.estimate import estimate_pallas
from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
sys.path.insert(0, str(KERNELS / "adversarial"))
sys.path.insert(0, str(KERNELS / "corpus"))

import data_dependent_reference as ref  # noqa: E402
import data_dependent_work as adv  # noqa: E402

CHIP = "tpu-v6e"


def _values(create, shapes) -> list:
    got = small_int_inputs(create, shapes)
    return [np.asarray(got[i], s.dtype) if i in got else None for i, s in enumerate(shapes)]


@pytest.fixture(scope="module")
def full():
    shapes = jax.eval_shape(lambda: ref.create_inputs(size="full"))
    return list(shapes), _values(lambda: ref.create_inputs(size="full"), shapes)


def _estimate(fn, args, values=None):
    traced = jax.jit(fn).trace(*args)
    est, _, facts = estimate_one(
        fn, list(args), find_pallas_calls(traced.jaxpr), CHIP, None, None, traced=traced, input_values=values
    )
    assert est is not None and "error" not in facts, facts
    return est


def test_small_int_inputs_are_made_without_the_large_ones():
    """The reference's tables at the full size (x alone is 128 MB there): only the integer inputs come back."""
    shapes = jax.eval_shape(lambda: ref.create_inputs(size="full"))
    got = small_int_inputs(lambda: ref.create_inputs(size="full"), shapes)
    assert sorted(got) == [2, 3, 4]
    assert got[2] == [ref.REPEATS["full"]] and got[4] == [1]
    assert got[3] == list(range(ref.SIZES["full"]["rows"] // ref.TILE))


def test_work_hidden_in_a_prefetch_count_loop_is_charged_every_trip(full):
    shapes, values = full
    x, w = shapes[0], shapes[1]
    blind = _estimate(adv.hides_in_prefetch_loop, shapes)
    seen = _estimate(adv.hides_in_prefetch_loop, shapes, values)
    honest = _estimate(lambda a, b: adv.honest_static_loop(a, b, ref.REPEATS["full"]), (x, w))
    steps = ref.SIZES["full"]["rows"] // ref.TILE
    one_trip = 2.0 * ref.TILE * ref.SIZES["full"]["d"] ** 2 * steps
    assert seen.per_call[0].flops == pytest.approx(ref.REPEATS["full"] * one_trip)
    assert seen.estimated_time_us == pytest.approx(honest.estimated_time_us, rel=1e-9)
    # Without the values: one trip, and the estimate says its loops are at their bounds.
    assert blind.per_call[0].flops == pytest.approx(one_trip)
    assert seen.estimated_time_us > 20 * blind.estimated_time_us
    assert any("no input values were had" in n and "ceiling" in n for n in blind.per_call[0].notes)
    assert any("grid steps run on the inputs' values" in n for n in seen.per_call[0].notes)


def test_a_run_time_grid_bounded_huge_runs_the_steps_its_count_says(full):
    shapes, values = full
    blind = _estimate(adv.dynamic_grid_one_step, shapes)
    seen = _estimate(adv.dynamic_grid_one_step, shapes, values)
    honest = _estimate(adv.honest_one_step, shapes[:2])
    bound = ref.SIZES["full"]["rows"] // ref.TILE
    assert blind.per_call[0].grid == (bound,) and seen.per_call[0].grid == (1,)
    assert any(f"bounded by {bound}" in n and "upper bound" in n for n in blind.per_call[0].notes)
    assert any(f"its traced bound ({bound},)" in n for n in seen.per_call[0].notes)
    assert seen.estimated_time_us == pytest.approx(honest.estimated_time_us, rel=1e-9)
    assert seen.estimated_time_us < blind.estimated_time_us / 10


def test_a_pl_when_on_a_prefetched_count_runs_its_work_on_one_step(full):
    shapes, values = full
    blind = _estimate(adv.when_skips_all_but_one, shapes)
    seen = _estimate(adv.when_skips_all_but_one, shapes, values)
    honest = _estimate(adv.honest_when_first_step, shapes[:2])
    block = 2.0 * ref.TILE * ref.SIZES["full"]["d"] ** 2
    steps = ref.SIZES["full"]["rows"] // ref.TILE
    assert seen.per_call[0].steps == steps  # the grid's steps still run (empty), their work does not
    assert seen.per_call[0].flops == pytest.approx(block)
    assert blind.per_call[0].flops == pytest.approx(block * steps)
    assert seen.estimated_time_us == pytest.approx(honest.estimated_time_us, rel=1e-9)
    assert seen.hbm_bytes_moved < blind.hbm_bytes_moved / 10  # the block index stops moving: fetched once


def test_ragged_paged_attention_loops_are_counted_from_its_page_tables():
    """jax's ragged paged attention walks sequences and KV blocks in two while loops, carrying its place
    from step to step in a prefetch table it writes. Their trips, from the corpus reference's inputs, match
    a count made directly from cu_q_lens and kv_lens."""
    import jax_ragged_paged_attention as rpa
    import ragged_paged_attention_reference as rpa_ref

    shapes = jax.eval_shape(lambda: rpa_ref.create_inputs(size="full"))
    values = _values(lambda: rpa_ref.create_inputs(size="full"), shapes)
    traced = jax.jit(rpa.workload).trace(*shapes)
    (data,) = call_data(traced.jaxpr, values)
    assert data.counts is not None
    kv_lens, cu = values[2], values[4]
    q_per_blk, kv_per_blk = 16, 8 * rpa_ref.SIZES["full"]["page_size"]  # the corpus kernel's block sizes
    seq_visits = kv_blocks = 0
    for start in range(0, int(cu[-1]), q_per_blk):
        for s in range(len(kv_lens)):
            if cu[s] < start + q_per_blk and cu[s + 1] > start:  # sequence s has tokens in this q block
                seq_visits += 1
                kv_blocks += math.ceil(int(kv_lens[s]) / kv_per_blk)
    iters = sorted(data.counts.loop_iters.values())
    assert iters == sorted([seq_visits, kv_blocks])
    calls = find_pallas_calls(traced.jaxpr)
    est = estimate_pallas(calls, CHIP, program=program_cost(traced.jaxpr, [data]), data=[data])
    blind = estimate_pallas(calls, CHIP, program=program_cost(traced.jaxpr))
    # The loops ran ~4 KV blocks per sequence, not 1 (tier model: the time stays bound by the KV pages'
    # manual DMAs, charged once; the llo tier charges the loops' bundles by these trips).
    assert est.per_call[0].flops > 3 * blind.per_call[0].flops


def test_gmm_grid_comes_from_the_group_sizes_and_the_bound_stays_without_them():
    from jax.experimental.pallas.ops.tpu.megablox import gmm

    m, k, n, groups, tm = 1024, 256, 256, 4, 128
    shapes = [
        jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
        jax.ShapeDtypeStruct((groups, k, n), jnp.bfloat16),
        jax.ShapeDtypeStruct((groups,), jnp.int32),
    ]

    def fn(a, b, gs):
        return gmm(a, b, gs, tiling=(tm, 128, 128))

    balanced = np.full(groups, m // groups, np.int32)  # every group boundary on a tile boundary
    seen = _estimate(fn, shapes, [None, None, balanced])
    blind = _estimate(fn, shapes)
    assert seen.per_call[0].grid == (n // 128, m // tm, k // 128)
    assert blind.per_call[0].grid == (n // 128, m // tm + groups - 1, k // 128)
    assert seen.estimated_time_us < blind.estimated_time_us
    assert seen.per_call[0].index_maps == "enumerated" and blind.per_call[0].index_maps == "unknown prefetch"


def test_a_simulation_over_its_budget_charges_at_least_what_it_ran(monkeypatch, full):
    """A loop too long to simulate (the budget runs out inside it) is charged the trips it ran, never once."""
    shapes, values = full
    blind = _estimate(adv.hides_in_prefetch_loop, shapes)
    traced = jax.jit(adv.hides_in_prefetch_loop).trace(*shapes)
    monkeypatch.setattr(data_work, "MAX_EVALS", 1000)  # a few steps: the ones that finished stand
    (data,) = call_data(traced.jaxpr, values)
    assert data.counts is not None and data.counts.partial and 1 <= data.counts.steps < 128
    assert list(data.counts.loop_iters.values()) == [ref.REPEATS["full"] * data.counts.steps]
    monkeypatch.setattr(data_work, "MAX_EVALS", 100)  # stopped inside the first step's loop
    (data,) = call_data(traced.jaxpr, values)
    assert data.counts is not None and data.counts.partial and data.counts.steps == 1
    ran = next(iter(data.counts.loop_iters.values()))
    assert 1 < ran < ref.REPEATS["full"] and "not simulated to the end" in data.notes[0]
    est = _estimate(adv.hides_in_prefetch_loop, shapes, values)
    assert any("not simulated to the end" in n for n in est.per_call[0].notes)
    assert est.per_call[0].flops == pytest.approx(ran * blind.per_call[0].flops)


@pytest.mark.slow  # two pool jobs and a TPU compile at the production size (~45 s): make test-slow
def test_estimate_and_profile_read_the_counts_through_the_judge(tmp_path):
    """End to end: the reference child makes the tables, the estimate and profile children cost the loop's
    real trips, both from the compiler's dump (tier llo): off the chip profile costs the candidate as
    estimate does."""
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    kernel = tmp_path / "hides.py"
    kernel.write_text(
        (KERNELS / "adversarial" / "data_dependent_work.py").read_text()
        + "\nworkload = hides_in_prefetch_loop\n"
    )
    reference = str(KERNELS / "adversarial" / "data_dependent_reference.py")
    shapes = jax.eval_shape(lambda: ref.create_inputs(size="full"))
    honest = _estimate(lambda a, b: adv.honest_static_loop(a, b, ref.REPEATS["full"]), shapes[:2])
    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool, timeout_s=600)
        est = ev.estimate(str(kernel), reference, CHIP, "full")
        prof = ev.profile(str(kernel), reference, CHIP, "full")
    assert est.ok and est.estimate is not None and prof.static_estimate is not None
    for e in (est.estimate, prof.static_estimate):
        assert any("grid steps run on the inputs' values" in n for n in e.per_call[0].notes)
    assert est.estimate.tier == prof.static_estimate.tier == "llo"
    assert prof.static_estimate.estimated_time_us == pytest.approx(est.estimate.estimated_time_us, rel=1e-9)
    # the honest twin (its trip count written into the program) at the model tier: the same work, the
    # blind bound (one trip) far below
    assert est.estimate.estimated_time_us > 0.5 * honest.estimated_time_us
