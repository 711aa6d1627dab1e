"""Max with indices (values and their argmax) over the last axis of a [8192, 32768] f32 matrix."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "max_with_indices", "model": "ops", "operator": "max_with_indices", "atol": 0, "rtol": 0}
SIZES = {"full": {"m": 8192, "n": 32768}, "small": {"m": 16, "n": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (d["m"], d["n"]), dtype or jnp.float32),)


def workload(x):
    return jnp.max(x, axis=1), jnp.argmax(x, axis=1)
