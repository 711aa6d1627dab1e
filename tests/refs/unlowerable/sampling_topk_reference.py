"""Top-k sampling's filter over a Llama-3 vocabulary: bf16 logits [64, 128256] -> the top 50 per row.

Returns the 50 largest logits of each row (descending, in bf16) and their token ids, as a top-k sampler
reads them before its softmax. `lax.top_k` has no Pallas TPU lowering as traced.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "sampling_topk_llama3_vocab",
    "model": "Llama-3-8B",
    "operator": "sampling_topk",
    "batch": 64,
    "vocab": 128256,
    "top_k": 50,
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}
SIZES = {"full": {"batch": 64, "vocab": 128256}, "small": {"batch": 16, "vocab": 2048}}
TOP_K = 50


def create_inputs(dtype=None, *, key=None, size="full"):
    """logits: [batch, vocab] (bf16 by default)."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    return ((jax.random.normal(key, (d["batch"], d["vocab"]), jnp.float32) * 4.0).astype(dtype),)


def workload(logits):
    values, ids = jax.lax.top_k(logits, TOP_K)
    return values, ids
