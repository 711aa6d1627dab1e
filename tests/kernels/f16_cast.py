"""A float16 cast inside the kernel: lowers, but the Mosaic compiler rejects it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, o_ref):
    o_ref[...] = a_ref[...].astype(jnp.float16).astype(jnp.float32).astype(o_ref.dtype)


def workload(a, b):
    m, _ = a.shape
    n = b.shape[1]
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype))(
        a[:, :n].astype(jnp.float32)
    ).astype(a.dtype)
