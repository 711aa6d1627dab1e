"""Sampling softmax over a Llama-2 vocabulary: bf16 logits [4096, 32000] divided by a traced temperature.

The temperature is a 0-d f32 input drawn from the key (in [0.5, 2]), so every seed has its own: a
kernel that bakes one temperature in as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "softmax_temperature_llama2_vocab",
    "model": "Llama-2-7B",
    "operator": "softmax_temperature",
    "tokens": 4096,
    "vocab": 32000,
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}
SIZES = {"full": {"tokens": 4096, "vocab": 32000}, "small": {"tokens": 64, "vocab": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    """logits: [tokens, vocab] (bf16 by default); temperature: f32[] in [0.5, 2]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    kl, kt = jax.random.split(key)
    logits = (jax.random.normal(kl, (d["tokens"], d["vocab"]), jnp.float32) * 4.0).astype(dtype)
    temperature = jax.random.uniform(kt, (), jnp.float32, 0.5, 2.0)
    return logits, temperature


def workload(logits, temperature):
    z = logits.astype(jnp.float32) / temperature
    return jax.nn.softmax(z, axis=-1).astype(logits.dtype)
