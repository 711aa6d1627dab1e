"""Computes one block of rows and broadcasts it: 32k's logsumexp for the first 8 rows only, their mean written
to every row (1/B of the work at any batch).

On the task's own draw every row's logsumexp is log(out) + ~0.2 to within one bf16 ulp, so this passes
every seed drawn like it; only inputs whose samples differ (the `channel_scales` regime's per-sample
scales) tell it apart. Must fail validation by default with an output mismatch.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ROWS = 8
_NT = (((1,), (1,)), ((), ()))  # a @ b.T


def _kernel(x_ref, w1_ref, b1_ref, w2_ref, b2_ref, o_ref):
    pre = jax.lax.dot_general(x_ref[...], w1_ref[...], _NT, preferred_element_type=jnp.float32)
    h = jax.nn.sigmoid(pre + b1_ref[...].astype(jnp.float32)).astype(w2_ref.dtype)
    z = jax.lax.dot_general(h, w2_ref[...], _NT, preferred_element_type=jnp.float32)
    z = z + b2_ref[...].astype(jnp.float32)
    m = jnp.max(z, axis=1, keepdims=True)
    o_ref[...] = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))


def workload(x, w1, b1, w2, b2):
    b, i = x.shape
    h, o = w1.shape[0], w2.shape[0]
    first = pl.pallas_call(
        _kernel,
        grid=(1,),
        in_specs=[
            pl.BlockSpec((ROWS, i), lambda g: (0, 0)),
            pl.BlockSpec((h, i), lambda g: (0, 0)),
            pl.BlockSpec((1, h), lambda g: (0, 0)),
            pl.BlockSpec((o, h), lambda g: (0, 0)),
            pl.BlockSpec((1, o), lambda g: (0, 0)),
        ],
        out_specs=pl.BlockSpec((ROWS, 1), lambda g: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((ROWS, 1), jnp.float32),
    )(x, w1, b1.reshape(1, h), w2, b2.reshape(1, o))
    return jnp.full((b,), jnp.mean(first), x.dtype)
