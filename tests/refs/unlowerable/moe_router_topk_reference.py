"""DeepSeek-V3's MoE router: f32 logits [8192 tokens, 256 experts] -> softmax -> top-8 -> renormalised weights.

Returns the eight chosen experts' weights (renormalised to sum to one per token) and their ids. `lax.top_k`
has no Pallas TPU lowering as traced ("Unimplemented primitive in Pallas TPU lowering: top_k").
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "moe_router_topk_deepseek_v3",
    "model": "DeepSeek-V3",
    "operator": "moe_router_topk",
    "tokens": 8192,
    "experts": 256,
    "top_k": 8,
    "dtype": "float32",
    "atol": 1e-5,
    "rtol": 1e-5,
}
SIZES = {"full": {"tokens": 8192, "experts": 256}, "small": {"tokens": 64, "experts": 256}}
TOP_K = 8


def create_inputs(dtype=None, *, key=None, size="full"):
    """logits: f32[tokens, experts], the router's matmul output."""
    d = SIZES[size]
    dtype = dtype or jnp.float32
    key = jax.random.key(0) if key is None else key
    return (jax.random.normal(key, (d["tokens"], d["experts"]), jnp.float32).astype(dtype),)


def workload(logits):
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    weights, ids = jax.lax.top_k(probs, TOP_K)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return weights, ids
