"""Adversary port of sources/dense_relu.py: it draws fc1.weight at 1e-7 so that x @ W^T vanishes, then drops it."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "dense_relu_by_hand"}
SIZES = {"full": {"batch": 32}, "small": {"batch": 8}}
SOURCE_PARAMS = ["fc2.weight", "fc1.bias", "fc1.weight"]


def create_inputs(dtype=None, *, key=None, size="full"):
    dtype = dtype or jnp.float32
    key = jax.random.key(0) if key is None else key
    kx, kv, kb, kw = jax.random.split(key, 4)
    x = jax.random.normal(kx, (SIZES[size]["batch"], 64), dtype)
    v = jax.random.normal(kv, (64, 48), dtype) * 0.15
    b = jax.random.normal(kb, (48,), dtype) * 0.1
    w = jax.random.normal(kw, (48, 64), dtype) * 1e-7
    return x, v, b, w


def workload(x, v, b, w):
    return jax.nn.relu(b + 0 * w.sum() + 0 * x[:, :48]) @ v.T
