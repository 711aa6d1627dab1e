"""jnp.sort inside a TPU kernel: no Pallas TPU lowering rule exists for it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, o_ref):
    o_ref[...] = jnp.sort(a_ref[...], axis=-1)


def workload(a, b):
    m, _ = a.shape
    n = b.shape[1]
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((m, n), a.dtype))(a[:, :n])
