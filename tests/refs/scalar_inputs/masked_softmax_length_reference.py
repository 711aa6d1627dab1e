"""Attention-score softmax over a Llama-3 8k context, keys past a traced valid length masked out.

The length is a 0-d int32 input drawn from the key (in [1, kv]), so every seed masks its own columns: a
kernel that bakes one length in as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "masked_softmax_length_llama3_8k",
    "model": "Llama-3-8B",
    "operator": "masked_softmax",
    "rows": 4096,
    "kv": 8192,
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}
SIZES = {"full": {"rows": 4096, "kv": 8192}, "small": {"rows": 64, "kv": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    """scores: [rows, kv] (bf16 by default); length: int32[] in [1, kv]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    ks, kl = jax.random.split(key)
    scores = (jax.random.normal(ks, (d["rows"], d["kv"]), jnp.float32) * 2.0).astype(dtype)
    length = jax.random.randint(kl, (), 1, d["kv"] + 1, jnp.int32)
    return scores, length


def workload(scores, length):
    valid = jnp.arange(scores.shape[-1]) < length
    z = jnp.where(valid, scores.astype(jnp.float32), -jnp.inf)
    return jax.nn.softmax(z, axis=-1).astype(scores.dtype)
