"""Sampling probabilities from an LM head at a Llama-2 vocabulary: softmax(hidden @ weight / temperature).

hidden bf16 [4096, 4096] x weight bf16 [4096, 32000] -> bf16 [4096, 32000]; the temperature is a 0-d f32
input drawn from the key (in [0.5, 2]), so every seed has its own: a kernel that bakes one temperature in
as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "sampling_probs_llama2",
    "model": "Llama-2-7B",
    "operator": "lm_head_softmax_temperature",
    "tokens": 4096,
    "hidden": 4096,
    "vocab": 32000,
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {
    "full": {"tokens": 4096, "hidden": 4096, "vocab": 32000},
    "small": {"tokens": 128, "hidden": 256, "vocab": 1024},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    """hidden [tokens, hidden], weight [hidden, vocab] (bf16 by default); temperature f32[] in [0.5, 2]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    kh, kw, kt = jax.random.split(key, 3)
    hidden = jax.random.normal(kh, (d["tokens"], d["hidden"]), dtype)
    scale = 4.0 * d["hidden"] ** -0.5  # logits of std ~4, as a trained LM head's are
    weight = (jax.random.normal(kw, (d["hidden"], d["vocab"]), jnp.float32) * scale).astype(dtype)
    temperature = jax.random.uniform(kt, (), jnp.float32, 0.5, 2.0)
    return hidden, weight, temperature


def workload(hidden, weight, temperature):
    logits = jnp.dot(hidden, weight, preferred_element_type=jnp.float32) / temperature
    return jax.nn.softmax(logits, axis=-1).astype(hidden.dtype)
