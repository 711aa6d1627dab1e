"""Column-block sum with the grid's dimension semantics as a parameter."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]  # [R, 128]


def column_sum(x, semantics: str):
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((rows, 128), x.dtype),
        grid=(cols // 128,),
        in_specs=[pl.BlockSpec((rows, 128), lambda j: (0, j))],  # x: the j-th column block
        out_specs=pl.BlockSpec((rows, 128), lambda j: (0, 0)),  # one output block, revisited
        compiler_params=pltpu.CompilerParams(dimension_semantics=(semantics,)),
    )(x)
