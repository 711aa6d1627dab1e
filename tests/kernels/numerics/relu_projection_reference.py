"""relu(x @ w) in float32 at the default precision: half its outputs are exact zeros for every method."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "relu_projection", "model": "test", "operator": "dense_matmul"}
SIZES = {"full": {"m": 8192, "k": 4096, "n": 4096}, "small": {"m": 256, "k": 1024, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (s["m"], s["k"]), jnp.float32)
    w = jax.random.normal(kw, (s["k"], s["n"]), jnp.float32) / s["k"] ** 0.5
    return x, w


def workload(x, w):
    return jax.nn.relu(x @ w)
