"""Outputs ~1e-4 with the harness's atol=1e-2: an all-zeros output would pass. The weak-check guard must see it."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "tiny", "model": "test", "operator": "scale", "atol": 1e-2, "rtol": 1e-2}
SIZES = {"full": {"rows": 1024, "cols": 1024}, "small": {"rows": 16, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0 if key is None else key)
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return x * 1e-4
