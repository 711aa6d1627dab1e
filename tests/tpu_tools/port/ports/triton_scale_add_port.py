"""A hand-written port of sources/triton_scale_add.py (the Triton kernel: out = x * w + b per row)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "triton_scale_add_port"}
SIZES = {"full": {"rows": 16}, "small": {"rows": 4}}
SOURCE_PARAMS = ["w", "b"]


def create_inputs(dtype=None, *, key=None, size="full"):
    dtype = dtype or jnp.float32
    key = jax.random.key(0) if key is None else key
    kx, kw, kb = jax.random.split(key, 3)
    x = jax.random.normal(kx, (SIZES[size]["rows"], 96), dtype)
    return x, jax.random.normal(kw, (96,), dtype), jax.random.normal(kb, (96,), dtype)


def workload(x, w, b):
    return x * w + b
