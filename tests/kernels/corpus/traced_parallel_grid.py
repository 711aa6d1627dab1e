"""Correct kernel whose grid length is traced (the number of 8-row tiles holding tokens, read from an
input) and marked "parallel": the TPU compiler accepts it (a dynamic grid); TPU interpret mode cannot
randomize the order of an axis whose length it does not know. Written for this corpus in the style of
published MoE kernels (a token-count-driven grid)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE = 8


def _double(x_ref, zeros_ref, o_ref):
    del zeros_ref  # aliased to the output: rows past the grid stay zero
    o_ref[...] = 2 * x_ref[...]


def workload(x, n_valid):
    rows, cols = x.shape
    tiles = n_valid[0] // TILE  # traced: the grid's length is data
    return pl.pallas_call(
        _double,
        grid=(tiles,),
        in_specs=[pl.BlockSpec((TILE, cols), lambda i: (i, 0)), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((TILE, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={1: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, jnp.zeros_like(x))
