"""Reduce-scatter as one single-device kernel over the global array: no shard_map, no remote DMA.

It computes the right numbers, but a Pallas kernel cannot be partitioned over a mesh: the real
compiler for the 4-chip topology must refuse it, so it may not pass as a multi-chip kernel.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

DEVICES = 4


def _kernel(x_ref, o_ref):
    acc = x_ref[0].astype(jnp.float32)
    for d in range(1, DEVICES):
        acc = acc + x_ref[d].astype(jnp.float32)
    o_ref[...] = acc.astype(o_ref.dtype)


def workload(partials):
    rows, n = partials.shape
    stacked = partials.reshape(DEVICES, rows // DEVICES, n)
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((rows // DEVICES, n), partials.dtype))(
        stacked
    )
