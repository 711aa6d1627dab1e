"""jnp.argmax-free top-1 via jnp.argsort inside the kernel: no TPU lowering for sort."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, o_ref):
    o_ref[...] = jnp.argsort(a_ref[...], axis=-1).astype(o_ref.dtype)


def workload(a, b):
    m, _ = a.shape
    n = b.shape[1]
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype))(a[:, :n])
