"""Attention in float32 at the default precision: on a TPU both dots run as one bf16 pass."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "f32_attention", "model": "test", "operator": "attention"}
SIZES = {"full": {"heads": 32, "seq": 1024, "dim": 128}, "small": {"heads": 4, "seq": 256, "dim": 128}}
PRECISION = None


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    kq, kk, kv = jax.random.split(key, 3)
    shape = (s["heads"], s["seq"], s["dim"])
    return tuple(jax.random.normal(k, shape, jnp.float32) for k in (kq, kk, kv))


def workload(q, k, v):
    s = jnp.einsum("hqd,hkd->hqk", q, k, precision=PRECISION) / q.shape[-1] ** 0.5
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v, precision=PRECISION)
