"""y = x + 1 over rows that small (256) and the target (4224) share only a 128-row alignment of: the
reference for kernels that floor away a remainder (tests the derived size's grain and the shape contract)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "rows_4224", "model": "test", "operator": "elementwise"}
SIZES = {"full": {"rows": 4224, "cols": 128}, "small": {"rows": 256, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0 if key is None else key)
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return x + 1.0
