"""Broken (uninitialised accumulator): a column sum over row tiles whose f32 accumulator is never zeroed
(the `@pl.when(i == 0)` init is missing). On a TPU it adds onto whatever VMEM held; TPU interpret mode
fills scratch with NaN. Compiles fine."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _colsum(x_ref, o_ref, acc_ref):
    acc_ref[...] += jnp.sum(x_ref[...], axis=0, keepdims=True).repeat(8, axis=0)

    @pl.when(pl.program_id(0) == pl.num_programs(0) - 1)
    def _store():
        o_ref[...] = acc_ref[0:1, :]


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _colsum,
        grid=(rows // 8,),
        in_specs=[pl.BlockSpec((8, cols), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((1, cols), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((1, cols), x.dtype),
        scratch_shapes=[pltpu.VMEM((8, cols), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(x)
