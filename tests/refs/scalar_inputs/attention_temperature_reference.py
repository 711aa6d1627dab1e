"""Causal self-attention at Llama-3-8B prefill shapes whose scores are scaled by a traced temperature (a
learned scalar, as in attention with a learnable softmax scale): q, k, v bf16 [2, 32, 4096, 128].

The scale is a 0-d f32 input drawn from the key (in [0.05, 0.2], around 1/sqrt(128)), so every seed has
its own: a kernel that bakes one scale in as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "attention_temperature_llama3_8b",
    "model": "Llama-3-8B",
    "operator": "attention_scaled",
    "batch": 2,
    "heads": 32,
    "seq": 4096,
    "head_dim": 128,
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {
    "full": {"batch": 2, "heads": 32, "seq": 4096, "head_dim": 128},
    "small": {"batch": 1, "heads": 2, "seq": 256, "head_dim": 128},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    """q, k, v: [batch, heads, seq, head_dim] (bf16 by default); scale: f32[] in [0.05, 0.2]."""
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0) if key is None else key
    kq, kk, kv, ks = jax.random.split(key, 4)
    shape = (d["batch"], d["heads"], d["seq"], d["head_dim"])
    q, k, v = (jax.random.normal(x, shape, dtype) for x in (kq, kk, kv))
    scale = jax.random.uniform(ks, (), jnp.float32, 0.05, 0.2)
    return q, k, v, scale


def workload(q, k, v, scale):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    n = q.shape[2]
    causal = jnp.tril(jnp.ones((n, n), dtype=bool))
    s = jnp.where(causal, s, -1e30)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32).astype(
        q.dtype
    )
