"""Block (100, 128) breaks the (8, 128) tiling rule on a 256-row array."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, o_ref):
    o_ref[...] = a_ref[...]


def workload(a, b):
    m, k = a.shape
    out = pl.pallas_call(
        _kernel,
        grid=(1,),
        in_specs=[pl.BlockSpec((100, 128), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((100, 128), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((m, k), a.dtype),
    )(a)
    n = b.shape[1]  # the output's shape is right at every size: only the block is wrong
    return jnp.zeros((m, n), a.dtype) + out[:, :n]
