"""An estimate never outlives the compiler's verdict: a rejected compile is a failed estimate, and a config
the compiler accepts is never pruned by our own VMEM count."""

from __future__ import annotations

import pytest
from conftest_paths import MATMUL_REF, kernel

from maxkernel.tpu_tools.cli.main import _verdict_exit
from maxkernel.tpu_tools.cost.autotune import ConfigResult, _prune_by_estimate
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

MiB = 1 << 20


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=240)


def test_a_kernel_the_compiler_rejects_gets_no_estimate(evaluator):
    r = evaluator.estimate(kernel("vmem_1gib"), MATMUL_REF, "tpu-v5e", "small")
    assert not r.ok and r.estimate is None
    assert r.failure is not None and r.failure.kind == "vmem_exhausted", r.failure
    assert r.failure.stage == "compile" and r.failure.message  # the compiler's own words
    assert r.failure.requested_bytes and r.failure.requested_bytes > 128 * MiB
    assert _verdict_exit(r) == 1


def _res(compiled: bool, tier: str = "model") -> dict:
    est = {
        "estimated_time_us": 100.0,
        "bound": "compute",
        "tier": tier,
        "vmem_bytes_needed": 18 * MiB,  # our count: above v5e's 16 MiB default
        "vmem_capacity_bytes": 128 * MiB,
        "above_scoped_vmem_limit": True,
        "fits_vmem": True,
    }
    return {"ok": True, "estimate": est, "layout_problems": [], "compiled": compiled}


def test_a_config_the_compiler_accepts_at_18_mib_is_kept():
    r = ConfigResult(config={"bm": 512}, status="not_run")
    assert _prune_by_estimate(r, _res(compiled=True), can_raise=True) is None
    assert r.status != "pruned" and r.estimate_us == 100.0
    # Without a compile (no libtpu), our count is all there is: the config is retried with a raised limit.
    r2 = ConfigResult(config={"bm": 512}, status="not_run")
    assert _prune_by_estimate(r2, _res(compiled=False), can_raise=True) == 20 * MiB


def test_a_compiler_vmem_rejection_is_retried_raised_or_pruned():
    res = {
        "ok": False,
        "error": "rejected",
        "compile_error": "Scoped allocation with size 18.00M and limit 16.00M exceeded scoped vmem limit",
        "compiler_vmem_bytes": 18 * MiB,
        "compiler_vmem_limit": 16 * MiB,
        "vmem_capacity_bytes": 128 * MiB,
        "layout_problems": [],
    }
    r = ConfigResult(config={"bm": 512}, status="not_run")
    assert _prune_by_estimate(r, res, can_raise=True) == 20 * MiB
    r2 = ConfigResult(config={"bm": 512, "vmem_limit_bytes": 20 * MiB}, status="not_run")
    assert _prune_by_estimate(r2, res, can_raise=True) is None and r2.pruned_reason == "vmem"


@pytest.mark.parametrize("target", ["tpu-v5p", "tpu-v6e", "tpu-7x"])
def test_each_chip_has_the_llo_tier_with_its_clock_and_source(evaluator, target):
    from maxkernel.tpu_tools.hardware.chips import get_chip

    r = evaluator.estimate(kernel("good_matmul"), MATMUL_REF, target, "small")
    assert r.ok and r.estimate is not None, r.failure
    chip = get_chip(target)
    assert r.estimate.tier == "llo", r.estimate.tier_note
    assert f"{chip.clock_ghz} GHz" in r.estimate.tier_note and chip.clock_source in r.estimate.tier_note
    assert all(c.bundles_per_step for c in r.estimate.per_call)


def test_compiled_grids_pair_with_traced_ones_across_megacore_splits_and_dynamic_axes():
    from maxkernel.tpu_tools.cost.estimate import DYNAMIC_BOUND, grids_pair

    sem = ("parallel", "parallel", "arbitrary")
    assert grids_pair((4, 4, 2), [2, 4, 2], sem, cores=2)  # v5p: the leading parallel axis, one core's share
    assert grids_pair((5, 4, 2), [3, 4, 2], sem, cores=2)
    assert not grids_pair((4, 4, 2), [4, 2, 1], sem, cores=2)
    assert not grids_pair((4, 4, 2), [2, 4, 2], ("arbitrary",) * 3, cores=2)  # no parallel axis: no split
    assert not grids_pair((4, 4, 2), [2, 4, 2], sem, cores=1)
    assert grids_pair((4, None, 2), [4, DYNAMIC_BOUND, 2], sem, cores=1)  # a run-time axis (megablox gmm)
    assert grids_pair((4, 8, 2), [4, DYNAMIC_BOUND, 2], sem, cores=1)


def test_kernels_dumped_in_another_order_than_traced_pair_by_their_grids():
    from maxkernel.tpu_tools.cost.estimate import match_kernels
    from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO
    from maxkernel.tpu_tools.problem.pallas_info import PallasCallInfo

    def call(name, grid):
        return PallasCallInfo(
            kernel_name=name, path="jit(f)/pallas_call", grid=grid, num_scalar_prefetch=0,
            dimension_semantics=("parallel", "parallel", "arbitrary"), inputs=[], outputs=[], scratch=[],
            interpret=False,
        )  # fmt: skip

    def prog(name, bounds):
        return ProgramLLO(program=name, is_kernel=True, iteration_bounds=bounds)

    up, down = call("up", (8, 28, 8)), call("down", (8, 4, 28))
    # 9p's expert: the dump lists the down projection's kernel first
    got = match_kernels([up, down], [prog("k1", [8, 4, 28]), prog("k0", [8, 28, 8])], "tpu-v6e")
    assert [p.program for p in got] == ["k0", "k1"]
    in_order = match_kernels([up, down], [prog("k0", [8, 28, 8]), prog("k1", [8, 4, 28])], "tpu-v6e")
    assert [p.program for p in in_order] == ["k0", "k1"]
    # two kernels of one grid dumped out of order cannot be told apart by it: they stay unpaired
    same = [call("a", (4, 4, 2)), call("b", (4, 4, 2)), call("c", (2, 2, 2))]
    dumped = [prog("kc", [2, 2, 2]), prog("ka", [4, 4, 2]), prog("kb", [4, 4, 2])]
    assert match_kernels(same, dumped, "tpu-v6e")[0] is None
    # named as Mosaic names them (`<kernel name>.<n>`), they pair by name (31k: two passes of one grid,
    # dumped before and after the matmul between them)
    named = [prog("b.1", [4, 4, 2]), prog("c.1", [2, 2, 2]), prog("a.1", [4, 4, 2])]
    assert [p.program for p in match_kernels(same, named, "tpu-v6e")] == ["a.1", "b.1", "c.1"]
    # past the orders searched (7 calls: 3p's staged MLA, each stage's kernel named `s<k>_...`), a call
    # still pairs with the one program carrying its name whose grid pairs
    seven = [call(f"s{k}_mm", (4, 4, 2)) for k in range(7)]
    dumped7 = [prog(f"s{k}_mm.1", [4, 4, 2]) for k in (3, 0, 1, 2, 6, 5, 4)]
    assert [p.program for p in match_kernels(seven, dumped7, "tpu-v6e")] == [f"s{k}_mm.1" for k in range(7)]


@pytest.mark.slow
def test_jax_flash_attention_is_estimated_at_its_production_shape(evaluator):
    """The 1p task's full size (bf16 [4,64,4096,128], 262144 grid steps) finishes with the compiler's
    schedule; benchmarks/estimate_speed.py measures what it costs against a compile (no timing here)."""
    r = evaluator.estimate(kernel("jax_flash_attention"), "1p", "tpu-v5e", "full")
    assert r.ok, r.failure
    est = r.estimate
    assert est.tier == "llo", est.tier_note
    # At least the causal half of 4·B·H·S²·D at v5e's 197 TFLOP/s peak: a real time, not a default.
    assert est.estimated_time_us > 0.5 * 4 * 4 * 64 * 4096**2 * 128 / 197e12 * 1e6


@pytest.mark.slow  # a 4096^3 program compiled with the LLO dump (~25 s): make test-slow
def test_xla_ops_beside_a_kernel_are_costed_fusion_by_fusion(evaluator):
    # 4096^3 bf16 in plain JAX beside a kernel that only copies: the matmul's fusion is MXU-bound on its own
    # (137 GFLOP at v6e's 918 TFLOP/s is 150 us), and the table holds XLA's ops, never the kernel itself.
    r = evaluator.estimate(kernel("matmul_beside_kernel"), MATMUL_REF, "tpu-v6e", "full")
    assert r.ok and r.estimate is not None, r.failure
    est = r.estimate
    out = est.outside_kernel
    assert out is not None and out.basis == "fusions"
    table = est.xla_fusions
    assert table is not None and table.fusions
    assert all(f.opcode != "custom-call" for f in table.fusions)  # the pallas_call is costed from its jaxpr
    assert out.flops == pytest.approx(2 * 4096**3, rel=0.01)
    assert out.time_us >= 2 * 4096**3 / 918e12 * 1e6
    assert out.time_us == pytest.approx(sum(f.estimated_time_us for f in table.fusions))
    kernels = sum(c.estimated_time_us for c in est.per_call)
    assert est.estimated_time_us >= kernels + out.time_us
    assert any("beside the kernels" in a for a in est.assumptions)


def test_a_body_that_can_never_compile_gets_no_estimate_and_never_blames_the_compiler(evaluator):
    r = evaluator.estimate(kernel("value_over_vmem"), MATMUL_REF, "tpu-v6e", "small")
    assert not r.ok and r.estimate is None and _verdict_exit(r) == 1
    f = r.failure
    assert f.kind == "vmem_exhausted" and f.stage == "trace", f
    assert f.summary.startswith("no estimate: a kernel body value is float32[8192, 8192]")
    assert "the compiler needs" not in f.summary  # no compile ran: the words are the check's own


def test_profile_refuses_the_same_body_before_any_compile(evaluator):
    # On a chip, profile compiles natively; the body check runs first there too (here: the estimate path).
    r = evaluator.profile(kernel("value_over_vmem"), MATMUL_REF, "tpu-v6e", "small")
    assert not r.ok and r.failure.kind == "vmem_exhausted" and r.failure.stage == "trace", r.failure
    assert "float32[8192, 8192]" in r.failure.summary


def test_identical_calls_the_compiler_kept_one_program_for_share_it():
    """A model's layers calling one kernel on the same shapes (Griffin's RG-LRU scan, twice): the compiler
    keeps one program for both, and each call is costed from it; calls that differ do not share."""
    from maxkernel.tpu_tools.cost.estimate import match_kernels
    from maxkernel.tpu_tools.cost.llo_parse import ProgramLLO
    from maxkernel.tpu_tools.problem.pallas_info import PallasCallInfo

    def call(name, grid, path):
        return PallasCallInfo(
            kernel_name=name, path=path, grid=grid, num_scalar_prefetch=0,
            dimension_semantics=("parallel", "arbitrary"), inputs=[], outputs=[], scratch=[], interpret=False,
        )  # fmt: skip

    scan = ProgramLLO(program="scan.1", is_kernel=True, iteration_bounds=[2, 1])
    layers = [
        call("scan", (2, 1), "jit(f)/layer0/pallas_call"),
        call("scan", (2, 1), "jit(f)/layer1/pallas_call"),
    ]
    assert [p.program for p in match_kernels(layers, [scan], "tpu-v5e")] == ["scan.1", "scan.1"]
    other = [layers[0], call("scan", (4, 1), "jit(f)/layer1/pallas_call")]  # another grid: another kernel
    assert match_kernels(other, [scan], "tpu-v5e") == [None, None]
    mm = ProgramLLO(program="mm.1", is_kernel=True, iteration_bounds=[8, 8])
    three = [*layers, call("mm", (8, 8), "jit(f)/head/pallas_call")]
    assert [p.program for p in match_kernels(three, [mm, scan], "tpu-v5e")] == ["scan.1", "scan.1", "mm.1"]
