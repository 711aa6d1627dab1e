"""An honest Pallas matmul that declares pl.CostEstimate(flops=1): a lie that would lower a static estimate."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _matmul_base import matmul_kernel  # noqa: E402


def workload(a, b, bm=128, bk=128, bn=128):
    m, k = a.shape
    _, n = b.shape
    return pl.pallas_call(
        matmul_kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),  # lhs (m, k): the [bm, bk] tile of this m-tile
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),  # rhs (k, n): the [bk, bn] tile of this n-tile
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(flops=1, transcendentals=0, bytes_accessed=1),
    )(a, b)
