"""Block (128, 64) on a bf16 (256, 256) array: the last block dim is not a multiple of 128."""

import jax
from jax.experimental import pallas as pl


def _kernel(a_ref, o_ref):
    o_ref[...] = a_ref[...] * 2


def workload(a, b):
    m, _ = a.shape
    n = b.shape[1]
    return pl.pallas_call(
        _kernel,
        grid=(m // 128, n // 64),
        in_specs=[pl.BlockSpec((128, 64), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((128, 64), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
    )(a[:, :n])
