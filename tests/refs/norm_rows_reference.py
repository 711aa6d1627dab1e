"""Row-wise L2 normalisation with sizes named `small` and `big` (no `full`): the target is the largest."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "norm_rows", "model": "test", "operator": "l2_norm", "atol": 1e-5, "rtol": 1e-5}
SIZES = {"small": {"rows": 24, "cols": 256}, "big": {"rows": 600, "cols": 1024}}


def create_inputs(dtype=None, *, key=None, size="big"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-6)
