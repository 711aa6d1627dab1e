"""Causal multi-head attention, softmax(q k^T / sqrt(d)) v per head, in f32: the plain-JAX baseline for
the corpus's attention kernels (written for the corpus)."""

import math

import jax
import jax.numpy as jnp

CONFIG = {"name": "causal_attention", "model": "corpus", "operator": "attention", "atol": 2e-3, "rtol": 2e-3}
SIZES = {
    "full": {"batch": 8, "heads": 16, "seq": 2048, "head_dim": 128},
    "small": {"batch": 1, "heads": 2, "seq": 256, "head_dim": 128},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    shape = (d["batch"], d["heads"], d["seq"], d["head_dim"])
    kq, kk, kv = jax.random.split(jax.random.key(0 if key is None else key), 3)
    dtype = dtype or jnp.float32
    return tuple(jax.random.normal(k, shape, dtype) for k in (kq, kk, kv))


def workload(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    seq = q.shape[2]
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    s = jnp.where(causal, s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v.astype(jnp.float32)).astype(q.dtype)
