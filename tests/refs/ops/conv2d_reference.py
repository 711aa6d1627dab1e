"""Conv 2-D, 3x3, stride 1, padding 1, NCHW x OIHW f32 (KernelBench-like: sized for an 80 GB GPU)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "conv2d", "model": "ops", "operator": "conv2d", "atol": 1e-3, "rtol": 1e-3}
SIZES = {
    "full": {"n": 16, "c": 64, "o": 128, "h": 256, "w": 256},
    "small": {"n": 2, "c": 8, "o": 16, "h": 16, "w": 16},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    x = jax.random.normal(kx, (d["n"], d["c"], d["h"], d["w"]), dtype or jnp.float32)
    w = jax.random.normal(kw, (d["o"], d["c"], 3, 3), dtype or jnp.float32) * 0.1
    return x, w


def workload(x, w):
    return lax.conv_general_dilated(
        x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
