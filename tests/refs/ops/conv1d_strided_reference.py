"""Conv 1-D, kernel 5, stride 2, dilation 2, no padding, NCL x OIL f32 (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "conv1d_strided", "model": "ops", "operator": "conv1d", "atol": 1e-3, "rtol": 1e-3}
SIZES = {"full": {"n": 32, "c": 64, "o": 128, "l": 65536}, "small": {"n": 2, "c": 8, "o": 16, "l": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    x = jax.random.normal(kx, (d["n"], d["c"], d["l"]), dtype or jnp.float32)
    w = jax.random.normal(kw, (d["o"], d["c"], 5), dtype or jnp.float32) * 0.1
    return x, w


def workload(x, w):
    return lax.conv_general_dilated(
        x, w, (2,), ((0, 0),), rhs_dilation=(2,), dimension_numbers=("NCH", "OIH", "NCH")
    )
