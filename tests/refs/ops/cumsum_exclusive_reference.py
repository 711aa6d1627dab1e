"""Exclusive cumulative sum (each entry: the sum of those before it) along the last axis, f32."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "cumsum_exclusive", "model": "ops", "operator": "cumsum", "atol": 1e-3, "rtol": 1e-4}
SIZES = {"full": {"m": 16384, "n": 65536}, "small": {"m": 8, "n": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (d["m"], d["n"]), dtype or jnp.float32),)


def workload(x):
    return jnp.cumsum(x, axis=1) - x
