"""Cumulative product along the last axis of a [32768, 8192] f32 matrix of values near 1."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "cumprod", "model": "ops", "operator": "cumprod", "atol": 1e-4, "rtol": 1e-3}
SIZES = {"full": {"m": 32768, "n": 8192}, "small": {"m": 16, "n": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    u = jax.random.uniform(k, (d["m"], d["n"]), jnp.float32, 0.99, 1.01)  # products stay O(1)
    return (u.astype(dtype or jnp.float32),)


def workload(x):
    return jnp.cumprod(x, axis=1)
