"""Inclusive cumulative sum along the last axis of a [32768, 32768] f32 matrix (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "cumsum", "model": "ops", "operator": "cumsum", "atol": 1e-3, "rtol": 1e-4}
SIZES = {"full": {"m": 32768, "n": 32768}, "small": {"m": 16, "n": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (d["m"], d["n"]), dtype or jnp.float32),)


def workload(x):
    return jnp.cumsum(x, axis=1)
