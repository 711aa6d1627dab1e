"""Top-p (nucleus) sampling's filter over a Llama-3 vocabulary: bf16 logits [64, 128256] at temperature 0.7
-> softmax -> sorted descending -> the smallest prefix whose mass reaches p = 0.9, renormalised.

Returns the sorted, filtered probabilities (f32, zero past the nucleus). `lax.sort` has no Pallas TPU
TensorCore lowering and `cumsum` none as traced: the sort stays in XLA, the rest goes to kernels.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "nucleus_filter_llama3_vocab",
    "model": "Llama-3-8B",
    "operator": "nucleus_filter",
    "batch": 64,
    "vocab": 128256,
    "top_p": 0.9,
    "temperature": 0.7,
    "dtype": "bfloat16",
    "atol": 1e-5,
    "rtol": 1e-3,
}
SIZES = {"full": {"batch": 64, "vocab": 128256}, "small": {"batch": 16, "vocab": 2048}}
TOP_P = 0.9
TEMPERATURE = 0.7


def create_inputs(dtype=None, *, key=None, size="full"):
    """logits: [batch, vocab] (bf16 by default)."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    return ((jax.random.normal(key, (d["batch"], d["vocab"]), jnp.float32) * 4.0).astype(dtype),)


def workload(logits):
    probs = jax.nn.softmax(logits.astype(jnp.float32) / TEMPERATURE, axis=-1)
    ranked = -jnp.sort(-probs, axis=-1)  # descending
    before = jnp.cumsum(ranked, axis=-1) - ranked  # the mass ranked above each entry
    kept = jnp.where(before < TOP_P, ranked, 0.0)
    return kept / jnp.sum(kept, axis=-1, keepdims=True)
