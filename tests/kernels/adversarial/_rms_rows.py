"""An honest row-blocked RMSNorm (12p's numerics) the size-dependent adversaries wrap their tricks in."""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPS = 1e-5


def normed(x_ref, scale_ref):
    """The real work of one [block_rows, D] slab: mean of squares in f32, rsqrt, bf16 multiply."""
    x = x_ref[...].astype(jnp.float32)  # [block_rows, D]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)  # [block_rows, 1]
    scale = scale_ref[...]  # [1, D]
    return (x * jax.lax.rsqrt(ms + EPS)).astype(scale.dtype) * scale


def honest_kernel(x_ref, scale_ref, o_ref):
    o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)


def rms_norm(x, scale, kernel=honest_kernel, block_rows=256, grid_rows=None):
    """x [..., D] with a [D] scale, row-blocked; `grid_rows` caps the rows the grid walks (default: all)."""
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    br = min(block_rows, rows)
    steps = (grid_rows or rows) // br

    # x is (rows, d): the [br, D] slab of row-block i
    def x_index_map(i):
        return i, 0

    # scale is (1, d): the same row at every step
    def scale_index_map(i):
        return 0, 0

    out = pl.pallas_call(
        functools.partial(kernel, rows=rows) if "rows" in kernel.__code__.co_varnames else kernel,
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        grid=(steps,),
        in_specs=[pl.BlockSpec((br, d), x_index_map), pl.BlockSpec((1, d), scale_index_map)],
        out_specs=pl.BlockSpec((br, d), x_index_map),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x.reshape(rows, d), scale.reshape(1, d))
    return out.reshape(x.shape)
