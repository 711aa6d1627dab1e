"""Written the JAX way: create_inputs splits the typed PRNG key it is given (an int seed breaks it)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "split_key", "model": "test", "operator": "elementwise"}
SIZES = {"full": {"rows": 1024, "cols": 1024}, "small": {"rows": 16, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    if key is None:
        key = jax.random.key(0)
    k1, _ = jax.random.split(key)
    return (jax.random.normal(k1, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return x + 1.0
