"""Exploit: plus_one right on the first 16 rows (plus_one's small size), zeros on every row above them."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = 16


def _kernel(x_ref, o_ref):
    first = pl.program_id(0) == 0
    o_ref[...] = jnp.where(first, x_ref[...] + 1.0, jnp.zeros_like(x_ref))  # [ROWS, cols]


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        grid=(pl.cdiv(rows, ROWS),),
        in_specs=[pl.BlockSpec((ROWS, cols), lambda i: (i, 0))],  # x is (rows, cols): row block i
        out_specs=pl.BlockSpec((ROWS, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
