"""Honest with a stated contract: plus-one in 128-row blocks that refuses, in its own words, any row
count its blocks do not divide. Small (256) and the target (4224) keep it: at the unaligned probe
(320 rows) it raises its own ValueError, reported as its shape contract."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS = 128


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # [BLOCK_ROWS, cols]


def workload(x):
    rows, cols = x.shape
    if rows % BLOCK_ROWS:
        raise ValueError(f"rows={rows} should be divisible by block_rows={BLOCK_ROWS}")
    return pl.pallas_call(
        _kernel,
        grid=(rows // BLOCK_ROWS,),
        in_specs=[pl.BlockSpec((BLOCK_ROWS, cols), lambda i: (i, 0))],  # x is (rows, cols): row block i
        out_specs=pl.BlockSpec((BLOCK_ROWS, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
