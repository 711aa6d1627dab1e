"""Reverse cumulative sum (suffix sums) along axis 1 of a [64, 4096, 512] f32 array (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "cumsum_reverse", "model": "ops", "operator": "cumsum", "atol": 1e-3, "rtol": 1e-4}
SIZES = {"full": {"b": 64, "n": 4096, "d": 512}, "small": {"b": 2, "n": 64, "d": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (s["b"], s["n"], s["d"]), dtype or jnp.float32),)


def workload(x):
    return lax.cumsum(x, axis=1, reverse=True)
