"""A residual stream with routed expert outputs added back at their tokens, then RMSNorm (Llama-3-8B width).

h: bf16 [8192 tokens, 4096]; 2048 routed rows y: bf16 [2048, 4096] scatter-added at token ids (repeats
allowed, so the adds accumulate); then RMSNorm with a learned scale. The scatter-add has no Pallas TPU
TensorCore lowering: it stays in XLA, the norm is a kernel.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "scatter_add_rmsnorm_llama3",
    "model": "Llama-3-8B",
    "operator": "scatter_add_rmsnorm",
    "tokens": 8192,
    "routed": 2048,
    "hidden": 4096,
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {
    "full": {"tokens": 8192, "routed": 2048, "hidden": 4096},
    "small": {"tokens": 64, "routed": 32, "hidden": 256},
}
EPS = 1e-6


def create_inputs(dtype=None, *, key=None, size="full"):
    """h: [tokens, hidden]; y: [routed, hidden]; ids: int32 [routed] in [0, tokens); scale: [hidden]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    kh, ky, ki, ks = jax.random.split(key, 4)
    h = jax.random.normal(kh, (d["tokens"], d["hidden"]), jnp.float32).astype(dtype)
    y = jax.random.normal(ky, (d["routed"], d["hidden"]), jnp.float32).astype(dtype)
    ids = jax.random.randint(ki, (d["routed"],), 0, d["tokens"], jnp.int32)
    scale = (1.0 + 0.1 * jax.random.normal(ks, (d["hidden"],), jnp.float32)).astype(dtype)
    return h, y, ids, scale


def workload(h, y, ids, scale):
    x = h.astype(jnp.float32).at[ids].add(y.astype(jnp.float32))
    rms = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)
    return (x * rms * scale.astype(jnp.float32)).astype(h.dtype)
