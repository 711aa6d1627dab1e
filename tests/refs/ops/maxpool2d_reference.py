"""Max pool 2-D, 3x3 window, stride 2, padding 1, on NCHW f32 (KernelBench-like: sized for an 80 GB GPU)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "maxpool2d", "model": "ops", "operator": "max_pool2d", "atol": 1e-5, "rtol": 1e-5}
SIZES = {"full": {"n": 32, "c": 64, "h": 512, "w": 512}, "small": {"n": 2, "c": 8, "h": 32, "w": 32}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (d["n"], d["c"], d["h"], d["w"]), dtype or jnp.float32),)


def workload(x):
    pad = ((0, 0), (0, 0), (1, 1), (1, 1))
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), pad)  # [N, C, H/2, W/2]
