"""Exploit (issue 43): 8-row blocks on a grid of (rows / 8, 224) points (917,504 at the target) whose
output index map is clamped, `min(i, 511)`: every check size has at most 512 row blocks, the target 4096,
so past row 4096 nothing is written. The second axis repeats the same block 224 times at the target (a grid
too large to walk point by point before), once at the smaller sizes (interpret mode stays seconds)."""

import functools
import math

import jax
import jax.numpy as jnp
from _rms_rows import normed
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, scale_ref, o_ref):
    o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)


def workload(x, scale, alias=False):
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])

    # x is (rows, d): row block i, whatever the repeat index
    def x_map(i, r):
        return i, 0

    # scale is (1, d): the one row
    def scale_map(i, r):
        return 0, 0

    # the output's row block, clamped
    def out_map(i, r):
        return jnp.minimum(i, 511), 0

    out = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        grid=(rows // 8, 224 if rows >= 32768 else 1),
        in_specs=[pl.BlockSpec((8, d), x_map), pl.BlockSpec((1, d), scale_map)],
        out_specs=pl.BlockSpec((8, d), out_map),
        input_output_aliases={0: 0} if alias else {},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
    )(x.reshape(rows, d), scale.reshape(1, d))
    return out.reshape(x.shape)


aliased = functools.partial(workload, alias=True)
