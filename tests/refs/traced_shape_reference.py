"""A reference that cannot be jitted on its own: it derives a shape from a traced value (like JaxBench 11p)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "traced_shape", "model": "test", "operator": "ragged"}
SIZES = {"full": {"rows": 64, "cols": 128}, "small": {"rows": 16, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    n = int(jnp.sum(x > 0))  # a traced value used as a shape
    return jnp.zeros((n,), x.dtype)
