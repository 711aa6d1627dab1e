"""Max pool 3-D, 3x3x3 window, stride 2, padding 1, on NCDHW f32 (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "maxpool3d", "model": "ops", "operator": "max_pool3d", "atol": 1e-5, "rtol": 1e-5}
SIZES = {
    "full": {"n": 16, "c": 32, "d": 64, "h": 64, "w": 64},
    "small": {"n": 2, "c": 4, "d": 8, "h": 8, "w": 16},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (s["n"], s["c"], s["d"], s["h"], s["w"]), dtype or jnp.float32),)


def workload(x):
    pad = ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1))
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3, 3), (1, 1, 2, 2, 2), pad)
