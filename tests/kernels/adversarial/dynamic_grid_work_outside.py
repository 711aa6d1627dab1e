"""Exploit: the answer computed in jnp, then a kernel on a run-time grid (the token-tile count, read from
an input) that adds zero to it, so that a census counting the dynamic grid's body at a generous bound
sees the kernel doing as much as the plain JAX. Against corpus/ragged_rows_reference.py.

The bound is the most the grid can run (the row tiles of x it walks): the kernel's add is one flop per
element at most, the jnp answer (x * 3 - x) two, so the work is still outside (work_outside_kernel)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE = 8


def _add_zero(x_ref, zeros_ref, o_ref):
    del zeros_ref  # aliased to the output: rows past the grid stay zero
    o_ref[...] = x_ref[...] + 0.0  # [TILE, cols]: the "work" the kernel claims


def workload(x, n_valid):
    rows, cols = x.shape
    answer = jnp.where(jnp.arange(rows)[:, None] < n_valid[0], x * 3.0 - x, 0.0)  # the real work, in XLA
    return pl.pallas_call(
        _add_zero,
        grid=(n_valid[0] // TILE,),  # traced: the grid's length is data
        in_specs=[
            pl.BlockSpec((TILE, cols), lambda i: (i, 0)),  # answer is (rows, cols): row tile i
            pl.BlockSpec(memory_space=pl.ANY),
        ],
        out_specs=pl.BlockSpec((TILE, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={1: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(answer, jnp.zeros_like(x))
