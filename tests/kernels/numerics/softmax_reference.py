"""A row softmax in float32 over wide rows (logits at attention's usual scale)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "row_softmax", "model": "test", "operator": "softmax"}
SIZES = {"full": {"rows": 16384, "cols": 8192}, "small": {"rows": 256, "cols": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    return (jax.random.normal(key, (s["rows"], s["cols"]), jnp.float32) * 3.0,)


def workload(x):
    return jax.nn.softmax(x, axis=-1)
