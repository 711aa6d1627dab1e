"""Honest at every shape its contract allows: plus-one in 128-row blocks with the grid floored (rows //
128), as jax's own matmul example does. Small (256) and the target (4224) are multiples of 128, so it
passes; at the unaligned probe (320 rows) rows 256-319 stay unwritten: its shape contract, a finding."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS = 128


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # [BLOCK_ROWS, cols]


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        grid=(rows // BLOCK_ROWS,),  # floors away rows % 128: the target has none
        in_specs=[pl.BlockSpec((BLOCK_ROWS, cols), lambda i: (i, 0))],  # x is (rows, cols): row block i
        out_specs=pl.BlockSpec((BLOCK_ROWS, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
