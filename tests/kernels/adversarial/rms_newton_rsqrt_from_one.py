"""Wrong off unit variance: RMSNorm whose rsqrt is three Newton steps started from 1.0.

y <- y (1.5 - 0.5 a y^2) converges to a^-1/2 only for a near 1: on N(0,1) rows (mean square 1 +- 0.05) three
steps are exact to f32, so the reference's own draw passes; rows of larger or smaller scale (a model's
activations) diverge or stall. Must fail validation by default (the input regimes), pass with one seed.
"""

import jax.numpy as jnp
from _rms_rows import EPS, rms_norm

NEWTON_STEPS = 3


def newton_kernel(x_ref, scale_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)  # [block_rows, D]
    a = jnp.mean(x * x, axis=-1, keepdims=True) + EPS  # [block_rows, 1]
    y = jnp.ones_like(a)  # the guess: right when a ~ 1
    for _ in range(NEWTON_STEPS):
        y = y * (1.5 - 0.5 * a * y * y)
    scale = scale_ref[...]  # [1, D]
    o_ref[...] = ((x * y).astype(scale.dtype) * scale).astype(o_ref.dtype)


def workload(x, scale):
    return rms_norm(x, scale, kernel=newton_kernel)
