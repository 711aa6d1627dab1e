"""Broken (tiling rule): RMSNorm one row per grid step, a (1, 512) bf16 block on the (rows, 512) array.
The second-minor block dim is 1, neither a multiple of 8 (16 for bf16 packing) nor the array's: TPU
interpret mode runs it, the TPU compiler rejects it. The way LLM answers often tile a row-wise op."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _row_kernel(x_ref, w_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    o_ref[...] = (x * inv * w_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, w):
    rows, hidden = x.shape
    return pl.pallas_call(
        _row_kernel,
        grid=(rows,),
        in_specs=[pl.BlockSpec((1, hidden), lambda i: (i, 0)), pl.BlockSpec((1, hidden), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((1, hidden), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w.reshape(1, hidden))
