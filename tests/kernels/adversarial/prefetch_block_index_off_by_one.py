"""Exploit (issue 58): x + 1 over 8-row blocks visited in reverse through a scalar-prefetched table built
off by one, `nb - i` where `nb - 1 - i` was meant: the first step asks for row block nb, one past the
array. On a TPU the block's DMA reads whatever lies past the input; TPU interpret mode refuses the
block index, and that is the kernel's fault, not a limit of the interpreter."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = 8


def _plus_one(order_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # [ROWS, cols]


def _row_block(i, order_ref):  # x and out are (rows, cols): the row block the table names for step i
    return order_ref[i], 0


def workload(x):
    rows, cols = x.shape
    nb = rows // ROWS
    order = nb - jnp.arange(nb, dtype=jnp.int32)  # the bug: nb - 1 - i
    return pl.pallas_call(
        _plus_one,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(nb,),
            in_specs=[pl.BlockSpec((ROWS, cols), _row_block)],
            out_specs=pl.BlockSpec((ROWS, cols), _row_block),
        ),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(order, x)
