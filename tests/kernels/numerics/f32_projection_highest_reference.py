"""An f32 projection at HIGHEST precision: float32 on every chip."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "f32_projection_highest", "model": "test", "operator": "dense_matmul"}
SIZES = {"full": {"m": 8192, "k": 4096, "n": 4096}, "small": {"m": 256, "k": 1024, "n": 256}}
PRECISION = jax.lax.Precision.HIGHEST  # asks for float32


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (s["m"], s["k"]), jnp.float32)
    w = jax.random.normal(kw, (s["k"], s["n"]), jnp.float32) / s["k"] ** 0.5
    return x, w


def workload(x, w):
    return jnp.dot(x, w, precision=PRECISION)


def get_flops(size="full"):
    s = SIZES[size]
    return 2 * s["m"] * s["k"] * s["n"]
