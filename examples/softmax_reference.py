"""A user reference: softmax over the last axis of [rows, cols] activations, in float32 math."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "example_softmax", "model": "example", "operator": "row_softmax"}
SIZES = {"full": {"rows": 8192, "cols": 4096}, "small": {"rows": 256, "cols": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    dims = SIZES[size]
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    return (jax.random.normal(key, (dims["rows"], dims["cols"]), dtype or jnp.float32) * 3.0,)


def workload(x):
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)
