"""Depthwise conv 2-D, 3x3, stride 1, padding 1, groups = channels, NCHW f32 (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {
    "name": "conv2d_depthwise",
    "model": "ops",
    "operator": "depthwise_conv2d",
    "atol": 1e-4,
    "rtol": 1e-4,
}
SIZES = {"full": {"n": 16, "c": 128, "h": 256, "w": 256}, "small": {"n": 2, "c": 8, "h": 16, "w": 16}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    x = jax.random.normal(kx, (d["n"], d["c"], d["h"], d["w"]), dtype or jnp.float32)
    w = jax.random.normal(kw, (d["c"], 1, 3, 3), dtype or jnp.float32) * 0.3
    return x, w


def workload(x, w):
    return lax.conv_general_dilated(
        x,
        w,
        (1, 1),
        ((1, 1), (1, 1)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=x.shape[1],
    )
