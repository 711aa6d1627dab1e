"""A projection y = x @ w (bf16, f32 accumulation) whose tolerance admits int8 activations.

w ~ N(0, 1/K) keeps y at unit scale, and atol = rtol = 0.05 holds int8 per-tensor rounding of N(0,1)
activations (max error ~0.03 at small): a quantized kernel is allowed here; one broken by outlier channels
is not (tests/kernels/adversarial/int8_per_tensor_projection.py).
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "quantizable_projection",
    "model": "test",
    "operator": "dense_matmul",
    "atol": 0.05,
    "rtol": 0.05,
}
SIZES = {"full": {"m": 1024, "k": 1024, "n": 512}, "small": {"m": 256, "k": 512, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    kx, kw = jax.random.split(jax.random.key(0) if key is None else key)
    x = jax.random.normal(kx, (d["m"], d["k"]), dtype)
    w = (jax.random.normal(kw, (d["k"], d["n"]), jnp.float32) / d["k"] ** 0.5).astype(dtype)
    return x, w


def workload(x, w):
    return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def get_flops(size="full"):
    d = SIZES[size]
    return 2 * d["m"] * d["k"] * d["n"]
