"""A small user reference in maxkernel's format: C = A @ B in bfloat16 with f32 accumulation."""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "example_matmul",
    "model": "example",
    "operator": "dense_matmul",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {"full": {"m": 4096, "k": 4096, "n": 4096}, "small": {"m": 256, "k": 512, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    dims = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ka, kb = jax.random.split(key)
    a = jax.random.normal(ka, (dims["m"], dims["k"]), dtype)
    b = jax.random.normal(kb, (dims["k"], dims["n"]), dtype)
    return a, b


def workload(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def get_flops(size="full"):
    d = SIZES[size]
    return 2 * d["m"] * d["k"] * d["n"]
