"""A rank-1 array blocked along its only axis follows Mosaic's rank-1 rule, at the target size.

A (128,) bf16 block of a (16384,) output is refused by Mosaic (a rank-1 block must be the whole dim,
a multiple of 8 x 128, or a power of 2 of at least 128 lanes x the dtype's packing: 256 for bf16).
32k_Gemm_Sigmoid_LogSumExp's first kernel failed to lower at full for this reason.
"""

from __future__ import annotations

import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.program import describe

ROWSUM = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"m": 16384, "d": 8192}, "small": {"m": 64, "d": 256}}  # VMEM bounds the row block


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    return (jax.random.normal(key, (s["m"], s["d"])).astype(jnp.bfloat16),)


def workload(x):
    return jnp.sum(x * x, axis=-1)  # a rank-1 bf16 output
"""


@pytest.mark.slow  # a compile at full: about 35 s on a shared CPU
def test_a_rank1_bf16_output_block_compiles_at_full(tmp_path):
    ref = tmp_path / "rowsum_ref.py"
    ref.write_text(ROWSUM)
    source = first_kernel(describe(str(ref)).model_dump(mode="json"), get_chip("tpu-v6e"))
    block = int(source.split("BLOCK_ROWS = ")[1].split()[0])
    assert block >= 256 and block & (block - 1) == 0, block
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    with WorkerPool(max_workers=1) as pool:
        full = Evaluator(pool, timeout_s=300).compile(str(kernel), str(ref), "tpu-v6e", "full")
    assert full.ok, full.failure
