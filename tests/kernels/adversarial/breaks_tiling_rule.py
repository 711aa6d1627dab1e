"""Interprets fine, but a (1, 512) block on a (rows, 512) bf16 array breaks the TPU's (8, 128) tiling
rule (16 rows for bf16): the real compiler rejects it, so validate must fail it before interpreting."""

import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        grid=(rows,),
        in_specs=[pl.BlockSpec((1, cols), lambda i: (i, 0))],  # one row per step: not a multiple of 16
        out_specs=pl.BlockSpec((1, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
