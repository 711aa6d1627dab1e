"""Two contracts, one stated and one silent: plus-one in 256 x 256 blocks that refuses, in its own words, a
row count its blocks do not divide, but floors the column grid, so the columns past the last whole block
are never written. Moved together, the refusal hides the dropped columns; moved one at a time, both show."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK = 256


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # [BLOCK, BLOCK]


def workload(x):
    rows, cols = x.shape
    if rows % BLOCK:
        raise ValueError(f"rows={rows} should be divisible by block_rows={BLOCK}")
    return pl.pallas_call(
        _kernel,
        grid=(rows // BLOCK, cols // BLOCK),  # the column grid floors away a remainder
        in_specs=[pl.BlockSpec((BLOCK, BLOCK), lambda i, j: (i, j))],  # x is (rows, cols): block (i, j)
        out_specs=pl.BlockSpec((BLOCK, BLOCK), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x)
