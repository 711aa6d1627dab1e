"""Built to spill: a (64, 1024) f32 block is 64 vregs, and the kernel keeps it and a same-size accumulator live."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def spill_kernel(x_ref, o_ref):
    x = x_ref[...]
    acc = x
    for i in range(1, 3):
        acc = acc * pltpu.roll(x, i, 1) + pltpu.roll(x, i, 0)
    o_ref[...] = acc


def workload(x):
    return pl.pallas_call(
        spill_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 64,),
        in_specs=[pl.BlockSpec((64, 1024), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((64, 1024), lambda i: (i, 0)),
    )(x)
