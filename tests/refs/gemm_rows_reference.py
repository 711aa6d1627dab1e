"""C = A @ B in float32, plain jnp.dot: only M scales between the sizes (256 rows small, 2048 at the target),
so the derived check size has more row blocks than small while K and N stay two 128-wide blocks each."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "gemm_rows", "model": "test", "operator": "dense_matmul", "atol": 1e-3, "rtol": 1e-3}
SIZES = {"full": {"m": 2048, "k": 256, "n": 256}, "small": {"m": 256, "k": 256, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ka, kb = jax.random.split(key)
    dtype = dtype or jnp.float32
    return jax.random.normal(ka, (d["m"], d["k"]), dtype), jax.random.normal(kb, (d["k"], d["n"]), dtype)


def workload(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def get_flops(size="full"):
    d = SIZES[size]
    return 2 * d["m"] * d["k"] * d["n"]
