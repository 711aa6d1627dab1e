"""y = x + 1 (f32): the reference for the DMA test kernels."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "plus_one", "model": "test", "operator": "elementwise"}
SIZES = {"full": {"rows": 1024, "cols": 1024}, "small": {"rows": 16, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0 if key is None else key)
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return x + 1.0
