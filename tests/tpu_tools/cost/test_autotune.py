"""autotune: prune before running (VMEM, legality), keep failures as data, report the best valid config."""

from __future__ import annotations

import re

import pytest

from maxkernel.tpu_tools.cost.autotune import SpaceError, autotune, expand
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

# A generic user template: no clamping, so a block larger than the array is taken as written.
SOURCE = """
import functools
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BN, BK = ${bm}, ${bn}, ${bk}


def _kernel(a_ref, b_ref, o_ref, acc_ref, *, k_steps):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == k_steps - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(a, b):
    m, k = a.shape
    n = b.shape[1]
    grid = (pl.cdiv(m, BM), pl.cdiv(n, BN), pl.cdiv(k, BK))
    return pl.pallas_call(
        functools.partial(_kernel, k_steps=grid[2]),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=grid,
        in_specs=[pl.BlockSpec((BM, BK), lambda i, j, kk: (i, kk)), pl.BlockSpec((BK, BN), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((BM, BN), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((BM, BN), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=100 * 2**20
        ),
        interpret=False,
    )(a, b)
"""


def test_space_errors_are_the_callers():
    with pytest.raises(SpaceError, match="non-empty list"):
        expand({"bm": []})
    assert len(expand({"a": [1, 2], "b": ["x", "y", "z"]})) == 6


@pytest.mark.slow
def test_small_sweep_prunes_by_vmem_and_layout_keeps_failures_and_picks_a_valid_best(tmp_path):
    # Ranked and compiled at the target size (8p_GEMM's production M=K=8192, N=28672), validated at the
    # check sizes (small K=256, derived K=384): the template has no K remainder, so bk is 128, the block
    # that divides K at every size (bk=256 is right at small only, shape_specialized at the derived size).
    space = {"bm": [256, 8192, 100], "bn": [896, 8192], "bk": [128]}
    with WorkerPool(max_workers=1) as pool:
        report = autotune(
            Evaluator(pool, timeout_s=240),
            SOURCE,
            space,
            "8p_GEMM",
            "tpu-v6e",
            max_configs=2,
            workdir=tmp_path,
        )
        # the same sweep again in this process (the Auto loop's next iteration): the same kernel bytes for
        # the same reference, target and size are not compiled again, and their estimates are the same
        again = autotune(
            Evaluator(pool, timeout_s=240), SOURCE, space, "8p_GEMM", "tpu-v6e", max_configs=1,
            workdir=tmp_path / "again",
        )  # fmt: skip
    estimated = [r for r in report.configs if r.estimate_us is not None]
    reused = [m for n in again.notes if (m := re.match(r"(\d+) of \1 configs' estimates reused", n))]
    assert estimated and reused and int(reused[0].group(1)) >= len(estimated), again.notes
    assert [r.estimate_us for r in again.configs] == [r.estimate_us for r in report.configs]
    assert not any("reused" in n for n in report.notes)
    assert report.size == "full"
    by_cfg = {(r.config["bm"], r.config["bn"]): r for r in report.configs}
    huge = by_cfg[(8192, 8192)]
    assert huge.status == "pruned" and huge.pruned_reason == "vmem" and huge.compile_ok is None
    assert "VMEM" in huge.failure  # the reason is kept as data on the config
    assert by_cfg[(100, 896)].pruned_reason == "layout"  # 100 rows: neither a multiple of 8 nor M
    assert report.pruned["vmem"] >= 1 and report.space_size == 6
    # the top-ranked config validated, so the second of max_configs=2 could not beat it: not evaluated
    assert report.evaluated == 1 and report.kind == "estimate"
    skipped = [r for r in report.configs if (r.failure or "").startswith("not evaluated")]
    assert len(skipped) == 1 and skipped[0].compile_ok is None and skipped[0].status == "not_run"
    assert any("1 of the top 2 configs not evaluated" in n for n in report.notes)
    assert report.best is not None and report.best.status == "valid" and report.best.validate_ok
    assert report.best.config == {
        "bm": 8192,
        "bn": 896,
        "bk": 128,
    }  # all of M in one block at the target size (B is read once): the fastest estimate that fits VMEM
    ranked = [r for r in report.configs if r.status == "not_run"]
    assert all(r.estimate_us >= report.best.estimate_us for r in ranked)
