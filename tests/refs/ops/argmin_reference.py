"""Argmin over the last axis of a [16384, 16384] f32 matrix (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "argmin", "model": "ops", "operator": "argmin", "atol": 0, "rtol": 0}
SIZES = {"full": {"m": 16384, "n": 16384}, "small": {"m": 16, "n": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (d["m"], d["n"]), dtype or jnp.float32),)


def workload(x):
    return jnp.argmin(x, axis=1)
