"""Conv 3-D, 3x3x3, stride 1, no padding, NCDHW x OIDHW f32 (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "conv3d", "model": "ops", "operator": "conv3d", "atol": 1e-3, "rtol": 1e-3}
SIZES = {
    "full": {"n": 8, "c": 16, "o": 64, "d": 32, "h": 64, "w": 64},
    "small": {"n": 2, "c": 4, "o": 8, "d": 6, "h": 8, "w": 10},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    x = jax.random.normal(kx, (s["n"], s["c"], s["d"], s["h"], s["w"]), dtype or jnp.float32)
    w = jax.random.normal(kw, (s["o"], s["c"], 3, 3, 3), dtype or jnp.float32) * 0.1
    return x, w


def workload(x, w):
    return lax.conv_general_dilated(x, w, (1, 1, 1), "VALID", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))
