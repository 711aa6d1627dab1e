"""Exploit: the answer computed in jnp, then a kernel on a run-time grid that adds zero to it, handed a
64K-entry scalar-prefetch table its index maps read: a census that bounds a run-time axis by the longest
table would credit the kernel with 64K steps of "work" and call the plain JAX an epilogue. Against
corpus/ragged_rows_reference.py. The axis is also capped by the blocks of the kernel's largest operand
(rows / 8), so the work is still outside (work_outside_kernel)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE = 8
TABLE = 1 << 16


def _add_zero(table_ref, x_ref, zeros_ref, o_ref):
    del table_ref, zeros_ref  # the table only lengthens the bound; zeros: aliased to the output
    o_ref[...] = x_ref[...] + 0.0  # [TILE, cols]: the "work" the kernel claims


def _row_tile(i, table_ref):  # answer is (rows, cols): row tile i, through the table (always 0 + i)
    return (table_ref[i] * 0 + i, 0)


def workload(x, n_valid):
    rows, cols = x.shape
    answer = jnp.where(jnp.arange(rows)[:, None] < n_valid[0], x * 3.0 - x, 0.0)  # the real work, in XLA
    return pl.pallas_call(
        _add_zero,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(n_valid[0] // TILE,),  # traced: the grid's length is data
            in_specs=[pl.BlockSpec((TILE, cols), _row_tile), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((TILE, cols), _row_tile),
        ),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(jnp.zeros((TABLE,), jnp.int32), answer, jnp.zeros_like(x))
