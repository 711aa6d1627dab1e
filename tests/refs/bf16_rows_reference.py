"""y = 2x on a bf16 (rows, 512) array: the reference for the (8, 128) tiling-rule kernel."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "bf16_rows", "model": "test", "operator": "scale", "atol": 1e-2, "rtol": 1e-2}
SIZES = {"full": {"rows": 1024, "cols": 512}, "small": {"rows": 128, "cols": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.bfloat16),)


def workload(x):
    return x * 2
