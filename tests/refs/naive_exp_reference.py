"""y = exp(x * x) in f32, written naively: inf once |x| passes ~9.4 (the input regimes' fallback to the own draw)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "naive_exp", "model": "test", "operator": "elementwise"}
SIZES = {"full": {"rows": 256, "cols": 1024}, "small": {"rows": 16, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    return (jax.random.normal(key, (d["rows"], d["cols"]), dtype or jnp.float32),)


def workload(x):
    return jnp.exp(x * x)
