"""2p GQA_Attention: Llama-3.1-405B grouped-query causal attention, layout BSHD (sheet §5, 2p).

Pure attention over given Q/K/V (no projections). Query head h reads KV head h // G, G = Hq / Hkv;
the math per (batch, head) is 1p's: bf16 scores, bf16-rounded scale, -1e9 fill, bf16 softmax.

A package because a Pallas reference kernel lives beside it (``pallas_reference.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_query_heads": 128, "num_kv_heads": 8, "head_dim": 128},
    # Group size 16 as in the full shape.
    "small": {"batch": 1, "seq_len": 256, "num_query_heads": 32, "num_kv_heads": 2, "head_dim": 128},
}

CONFIG = {
    "name": "llama3_405b_gqa",
    "model": "Llama-3.1-405B",
    "operator": "gqa_attention",
    **SIZES["full"],
    "emb_dim": 16384,  # unused by the workload (kept for the model's record)
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """query [B, S, Hq, D], key and value [B, S, Hkv, D]; all N(0,1)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3 = split(make_key(key, SEED), 3)
    b, s, hd = d["batch"], d["seq_len"], d["head_dim"]
    q = normal(k1, (b, s, d["num_query_heads"], hd), dtype)
    k = normal(k2, (b, s, d["num_kv_heads"], hd), dtype)
    v = normal(k3, (b, s, d["num_kv_heads"], hd), dtype)
    return q, k, v


def workload(query: jax.Array, key: jax.Array, value: jax.Array) -> jax.Array:
    """Causal GQA; output [B, S, Hq, D] in the input dtype."""
    b, s, hq, hd = query.shape
    hkv = key.shape[2]
    q = query.reshape(b, s, hkv, hq // hkv, hd)  # head h = kv_head * G + g
    scores = jnp.einsum("bqhgd,bkhd->bhgqk", q, key) * (hd**-0.5)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, -1e9)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bhgqk,bkhd->bqhgd", probs, value)
    return out.reshape(b, s, hq, hd)


def get_flops(size: str = "full") -> int:
    """4·B·Hq·S²·D (QKᵀ and PV; the causal half is not discounted)."""
    d = SIZES[size]
    return 4 * d["batch"] * d["num_query_heads"] * d["seq_len"] ** 2 * d["head_dim"]
