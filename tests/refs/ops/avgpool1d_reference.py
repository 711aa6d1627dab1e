"""Average pool 1-D, window 8, stride 4, no padding, on NCL f32 (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "avgpool1d", "model": "ops", "operator": "avg_pool1d", "atol": 1e-5, "rtol": 1e-5}
SIZES = {"full": {"n": 64, "c": 128, "l": 65536}, "small": {"n": 4, "c": 16, "l": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (d["n"], d["c"], d["l"]), dtype or jnp.float32),)


def workload(x):
    s = lax.reduce_window(x, 0.0, lax.add, (1, 1, 8), (1, 1, 4), "VALID")  # [N, C, (L-8)/4+1]
    return s / 8.0
