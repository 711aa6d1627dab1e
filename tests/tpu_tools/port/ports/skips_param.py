"""Adversary port of sources/dense_relu.py: it declares no fc1.bias (the source's bias would stay fixed)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "dense_relu_by_hand"}
SIZES = {"full": {"batch": 32}, "small": {"batch": 8}}
SOURCE_PARAMS = ["fc2.weight", "fc1.weight"]


def create_inputs(dtype=None, *, key=None, size="full"):
    dtype = dtype or jnp.float32
    key = jax.random.key(0) if key is None else key
    kx, kv, kw = jax.random.split(key, 3)
    x = jax.random.normal(kx, (SIZES[size]["batch"], 64), dtype)
    v = jax.random.normal(kv, (64, 48), dtype) * 0.15
    w = jax.random.normal(kw, (48, 64), dtype) * 0.12
    return x, v, w


def workload(x, v, w):
    return jax.nn.relu(x @ w.T + 0.1) @ v.T
