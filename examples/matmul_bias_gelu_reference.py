"""A user reference: gelu(x @ w + b), a dense layer in bf16 with f32 accumulation and the tanh GELU."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "example_matmul_bias_gelu", "model": "example", "operator": "dense_gelu"}
SIZES = {"full": {"m": 4096, "k": 4096, "n": 4096}, "small": {"m": 256, "k": 512, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    kx, kw, kb = jax.random.split(key, 3)
    x = jax.random.normal(kx, (d["m"], d["k"]), dtype)
    w = (jax.random.normal(kw, (d["k"], d["n"]), dtype) * (d["k"] ** -0.5)).astype(dtype)
    b = jax.random.normal(kb, (d["n"],), dtype) * 0.1
    return x, w, b


def workload(x, w, b):
    y = jnp.dot(x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)
    return jax.nn.gelu(y).astype(x.dtype)
