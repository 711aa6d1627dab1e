"""A copy kernel whose one block (2 x 2 buffers x 10 MiB) overshoots the 32 MiB scoped VMEM default."""

import jax
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _copy,
        grid=(1,),
        in_specs=[pl.BlockSpec((rows, cols), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((rows, cols), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
