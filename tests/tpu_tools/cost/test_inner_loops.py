"""Loops inside a kernel body (fori_loop/scan/while) are charged their trip count, and a pl.when branch's
share scales only the work inside the branch (the f32 MXU floor of a dot outside every branch is whole).

The dumps are our own libtpu compiles for v5e of tests/kernels/adversarial/hides_work_in_a_fori_loop.py
(tests/data/llo/regenerate.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from conftest_paths import KERNELS, TESTS
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from maxkernel.tpu_tools.cost.estimate import estimate_pallas
from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO, parse_dump_dir
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

DATA = TESTS / "data" / "llo"


def _loops():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "loops", KERNELS / "adversarial" / "hides_work_in_a_fori_loop.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LOOPS = _loops()


def _estimate(fn, rows, dump, chip="tpu-v5e"):
    jaxpr = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((rows, 512), jnp.float32))
    llo = parse_dump_dir(DATA / dump)
    e = estimate_pallas(find_pallas_calls(jaxpr), chip, program=program_cost(jaxpr), llo=llo)
    assert e.tier == "llo", e.tier_note
    return e.per_call[0]


def test_the_dump_states_each_body_loops_trip_count():
    for dump, trips in (("v5e_loop8", 8), ("v5e_loop64", 64)):
        (k,) = [p for p in parse_dump_dir(DATA / dump) if p.is_kernel]
        (lp,) = k.inner_loops
        assert lp.trip_count == trips and lp.depth == 2 and lp.bundles == k.inner_loop_bundles
        assert k.executed_loop_bundles == k.loop_bundles + lp.bundles * (trips - 1)
    (dyn,) = [p for p in parse_dump_dir(DATA / "v5e_loop_dynamic") if p.is_kernel]
    assert [lp.trip_count for lp in dyn.inner_loops] == [None]  # its bound is a register, not a literal


def test_a_loops_estimate_grows_with_its_trip_count():
    small = _estimate(LOOPS.looped, 4 * 8 * 8, "v5e_loop8")
    big = _estimate(LOOPS.looped, 4 * 8 * 64, "v5e_loop64")
    # 8x the trips: the loop body (20 bundles) is charged 64 times a step, not once (66 bundles both)
    assert big.bundles_per_step > 6 * small.bundles_per_step
    assert big.compute_time_us > 6 * small.compute_time_us
    assert any("x 64" in n and "trip" in n for n in big.notes)


def test_hiding_the_work_in_a_fori_loop_is_not_estimated_cheaper():
    """The adversary: the same tanh over 64 row groups, once as straight-line code and once in a
    fori_loop. Counted once, the loop's 66 bundles a step read 5x cheaper than the 340 of the straight code."""
    once = _estimate(LOOPS.once, 4 * 8 * 64, "v5e_once64")
    looped = _estimate(LOOPS.looped, 4 * 8 * 64, "v5e_loop64")
    assert looped.compute_time_us >= once.compute_time_us
    assert looped.estimated_time_us >= once.estimated_time_us


def test_a_one_step_kernels_fori_loop_is_not_taken_for_the_grid_loop():
    (k,) = [p for p in parse_dump_dir(DATA / "v5e_loop_single_step") if p.is_kernel]
    assert k.loop_bundles == 0 and k.loop_trip_count is None  # no grid loop: 16 was the fori_loop's
    (lp,) = k.inner_loops
    assert (
        lp.trip_count == 16 and k.executed_straight_line_bundles == k.straight_line_bundles + 15 * lp.bundles
    )
    e = _estimate(LOOPS.single_step, 8 * 16, "v5e_loop_single_step")
    assert e.bundles_per_step == k.executed_straight_line_bundles


def test_a_trip_count_known_only_at_run_time_is_said_so():
    e = _estimate(LOOPS.dynamic, 4 * 8 * 16, "v5e_loop_dynamic")
    assert any("trip count the dump does not state" in n and "counted once" in n for n in e.notes)


def _loop_matmul(a, b, trips):
    """Each step runs `trips` dots of its [128,128] blocks in a fori_loop (the model tier's view)."""

    def kernel(a_ref, b_ref, o_ref):
        def body(i, acc):
            return acc + jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        o_ref[...] = jax.lax.fori_loop(0, trips, body, jnp.zeros((128, 128), jnp.float32))

    spec = pl.BlockSpec((128, 128), lambda i: (i, 0))
    return pl.pallas_call(
        kernel,
        grid=(a.shape[0] // 128,),
        in_specs=[spec, pl.BlockSpec((128, 128), lambda i: (0, 0))],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(a.shape, jnp.float32),
    )(a, b)


@pytest.mark.parametrize("trips", [8, 64])
def test_the_model_tier_counts_a_loops_matmuls_times_its_trips(trips):
    a = jax.ShapeDtypeStruct((1024, 128), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((128, 128), jnp.bfloat16)
    one = jax.make_jaxpr(lambda a, b: _loop_matmul(a, b, 1))(a, b)
    many = jax.make_jaxpr(lambda a, b: _loop_matmul(a, b, trips))(a, b)
    assert program_cost(many).kernel_flops_per_step[0] == trips * program_cost(one).kernel_flops_per_step[0]
    e1 = estimate_pallas(find_pallas_calls(one), "tpu-v5e", program=program_cost(one)).per_call[0]
    en = estimate_pallas(find_pallas_calls(many), "tpu-v5e", program=program_cost(many)).per_call[0]
    assert en.flops == trips * e1.flops and en.compute_time_us > (trips / 2) * e1.compute_time_us


# ---------------------------------------------------------------------------------------------------
# pl.when shares scale the branches' bundles, never the f32 MXU floor of a dot outside them


def _f32_matmul(a, b, blk=512):
    def body(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    m, k = a.shape
    n = b.shape[1]
    return pl.pallas_call(
        body,
        grid=(m // blk, n // blk, k // blk),
        in_specs=[
            pl.BlockSpec((blk, blk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((blk, blk), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((blk, blk), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((blk, blk), jnp.float32)],
    )(a, b)


def test_a_branch_share_does_not_scale_the_f32_mxu_floor_of_a_dot_outside_every_branch():
    s = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)
    jaxpr = jax.make_jaxpr(_f32_matmul)(s, s)
    calls, prog = find_pallas_calls(jaxpr), program_cost(jaxpr)
    # The compiler's view, as a fake dump: a short loop body (the f32 passes' time is not in the bundles)
    # whose pl.when branches run on 1/8 of the steps each.
    llo = [ProgramLLO(program="f32_matmul", is_kernel=True, loop_bundles=400, iteration_bounds=[8, 8, 8])]
    e = estimate_pallas(calls, "tpu-v5e", program=prog, llo=llo).per_call[0]
    assert e.tier == "llo" and any("pl.when branches taken on 0.12, 0.12" in n for n in e.notes)
    floor_us = 2 * 4096**3 / get_chip("tpu-v5e").mxu_flops_per_s("float32") * 1e6
    assert e.compute_time_us == pytest.approx(floor_us, rel=1e-6)  # was floor_us x the branches' share
    assert any("sets it, unscaled" in n for n in e.notes)


def test_the_analysis_summary_names_the_loops_and_what_a_step_issues():
    from maxkernel.tpu_tools.cost.analyze import AnalysisReport, _program, summarize

    (k,) = [p for p in parse_dump_dir(DATA / "v5e_loop64") if p.is_kernel]
    report = AnalysisReport(ok=True, tier="llo", kernel_path="k.py", target="tpu-v5e", size="small")
    report.kernels = [_program(k)]
    text = summarize(report)
    assert "66 bundles per grid step (1326 as issued" in text and "20 x 64" in text


def test_a_trip_count_the_dump_does_not_state_is_taken_from_the_jaxpr_when_the_loops_pair(tmp_path):
    """The dump flags are internal: if libtpu stops writing the exit test's comment, the fori_loop's
    trip count (a scan's length over its unroll in the kernel's jaxpr) still charges the loop."""
    import shutil

    shutil.copytree(DATA / "v5e_loop64", tmp_path / "d")
    for f in (tmp_path / "d").glob("*final_bundles.txt"):
        f.write_text(f.read_text().replace("loop exit test", "exit"))
    jaxpr = jax.make_jaxpr(LOOPS.looped)(jax.ShapeDtypeStruct((4 * 8 * 64, 512), jnp.float32))
    prog = program_cost(jaxpr)
    assert prog.kernel_loop_trips == [[64]]
    llo = parse_dump_dir(tmp_path / "d")
    (k,) = [p for p in llo if p.is_kernel]
    assert [lp.trip_count for lp in k.inner_loops] == [None]
    e = estimate_pallas(find_pallas_calls(jaxpr), "tpu-v5e", program=prog, llo=llo).per_call[0]
    assert e.bundles_per_step == 1326 and any("from the body's jaxpr" in n for n in e.notes)
    # a while loop's trip count is a value: nothing to pair, the loop stays counted once and said so
    dyn = jax.make_jaxpr(LOOPS.dynamic)(jax.ShapeDtypeStruct((4 * 8 * 16, 512), jnp.float32))
    assert program_cost(dyn).kernel_loop_trips == [[None]]


def test_an_unrolled_scans_compiled_trip_count_is_its_length_over_the_unroll():
    def kernel(x_ref, o_ref):
        o_ref[...] = jax.lax.fori_loop(0, 256, lambda i, a: a * 1.01, x_ref[...], unroll=8)

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    jaxpr = jax.make_jaxpr(f)(jax.ShapeDtypeStruct((8, 128), jnp.float32))
    assert program_cost(jaxpr).kernel_loop_trips == [[32]]
