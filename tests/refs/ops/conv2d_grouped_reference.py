"""Grouped conv 2-D, 3x3, stride 2, padding 1, 4 groups, NCHW f32 (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "conv2d_grouped", "model": "ops", "operator": "grouped_conv2d", "atol": 1e-3, "rtol": 1e-3}
SIZES = {
    "full": {"n": 16, "c": 128, "o": 256, "h": 256, "w": 256},
    "small": {"n": 2, "c": 16, "o": 32, "h": 16, "w": 16},
}
GROUPS = 4


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    x = jax.random.normal(kx, (d["n"], d["c"], d["h"], d["w"]), dtype or jnp.float32)
    w = jax.random.normal(kw, (d["o"], d["c"] // GROUPS, 3, 3), dtype or jnp.float32) * 0.1
    return x, w


def workload(x, w):
    return lax.conv_general_dilated(
        x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=GROUPS
    )
