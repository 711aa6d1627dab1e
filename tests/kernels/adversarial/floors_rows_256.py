"""Exploit: plus-one in 256-row blocks with the grid floored (rows // 256), no masking: right at small
(256 rows), while the target (4224 rows) leaves 128 rows unwritten. Small and the target share only a
128-row alignment, so the derived size (a multiple of 128, not of 256) must catch it."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS = 256


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # [BLOCK_ROWS, cols]


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        grid=(rows // BLOCK_ROWS,),  # floors away rows % 256
        in_specs=[pl.BlockSpec((BLOCK_ROWS, cols), lambda i: (i, 0))],  # x is (rows, cols): row block i
        out_specs=pl.BlockSpec((BLOCK_ROWS, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
