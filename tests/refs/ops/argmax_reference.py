"""Argmax over axis 1 (not the last) of a [64, 4096, 2048] f32 array (KernelBench-like sizes)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "argmax", "model": "ops", "operator": "argmax", "atol": 0, "rtol": 0}
SIZES = {"full": {"b": 64, "n": 4096, "d": 2048}, "small": {"b": 2, "n": 64, "d": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    k = jax.random.key(0 if key is None else key)
    return (jax.random.normal(k, (s["b"], s["n"], s["d"]), dtype or jnp.float32),)


def workload(x):
    return jnp.argmax(x, axis=1)
