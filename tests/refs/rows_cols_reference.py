"""y = x + 1 over rows and columns that both scale (small 256 x 256, the target 2048 x 2048): the reference
for a shape contract told one dimension at a time."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "rows_cols", "model": "test", "operator": "elementwise"}
SIZES = {"full": {"rows": 2048, "cols": 2048}, "small": {"rows": 256, "cols": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0 if key is None else key)
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return x + 1.0
