"""A Llama-3-8B MLP up-projection whose output is scaled by a traced scalar (a LoRA-merged alpha / rank, a
muP multiplier or a per-tensor dequantisation scale): bf16 [4096, 4096] x bf16 [4096, 14336], times f32[].

The scale is a 0-d f32 input drawn from the key (in [0.5, 2]), so every seed has its own: a kernel that
bakes one scale in as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "scaled_projection_llama3_8b",
    "model": "Llama-3-8B",
    "operator": "scaled_matmul",
    "m": 4096,
    "k": 4096,
    "n": 14336,
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {"full": {"m": 4096, "k": 4096, "n": 14336}, "small": {"m": 128, "k": 256, "n": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    """x [m, k], w [k, n] (bf16 by default); scale f32[] in [0.5, 2]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    kx, kw, ks = jax.random.split(key, 3)
    x = jax.random.normal(kx, (d["m"], d["k"]), dtype)
    w = (jax.random.normal(kw, (d["k"], d["n"]), jnp.float32) * d["k"] ** -0.5).astype(dtype)
    scale = jax.random.uniform(ks, (), jnp.float32, 0.5, 2.0)
    return x, w, scale


def workload(x, w, scale):
    return (jnp.dot(x, w, preferred_element_type=jnp.float32) * scale).astype(x.dtype)
