"""Distillation-style cross entropy over a Llama-2 LM head: logits / a traced temperature, mean NLL.

hidden bf16 [4096, 4096] x weight bf16 [4096, 32000], labels int32 [4096]; the temperature is a 0-d f32
input drawn from the key (in [0.5, 2]), so every seed has its own: a kernel that bakes one temperature in
as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "cross_entropy_temperature_llama2",
    "model": "Llama-2-7B",
    "operator": "cross_entropy_temperature",
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
    """hidden [tokens, hidden], weight [hidden, vocab] (bf16), labels int32 [tokens], temperature f32[]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    kh, kw, kl, kt = jax.random.split(key, 4)
    hidden = jax.random.normal(kh, (d["tokens"], d["hidden"]), dtype)
    # logits of std ~4, as a trained LM head's are: the loss moves ~1/temperature (at std 1 it hardly moves)
    scale = 4.0 * d["hidden"] ** -0.5
    weight = (jax.random.normal(kw, (d["hidden"], d["vocab"]), jnp.float32) * scale).astype(dtype)
    labels = jax.random.randint(kl, (d["tokens"],), 0, d["vocab"], jnp.int32)
    temperature = jax.random.uniform(kt, (), jnp.float32, 0.5, 2.0)
    return hidden, weight, labels, temperature


def workload(hidden, weight, labels, temperature):
    logits = jnp.dot(hidden, weight, preferred_element_type=jnp.float32) / temperature
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return jnp.mean(lse - picked)
