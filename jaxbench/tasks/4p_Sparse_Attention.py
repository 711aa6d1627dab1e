"""4p Sparse_Attention: Llama-3.1-70B causal GQA in BHSD layout (sheet §5, 4p).

"Sparse" refers only to block skipping in a Splash-style kernel: the mask is plain causal. The softmax
scale is folded into q at input creation, so the workload applies none.

Tolerance: with k, v ~ N(0,1)·0.02 the attention is near-uniform and row i has magnitude about
0.02/√(i+1) (≈3e-4 for the last rows at S = 4096), so the harness's atol = 1e-2 lets an all-zeros
output pass most rows. atol = 1e-4 is ~3x below the smallest row scale, so an all-zeros output (or one
that zeroes the later rows) fails; a correct kernel with f32 softmax, with or without bf16 probabilities in
the PV matmul, stays within half of this bound at S = 4096 (measured on CPU against a NumPy f32 reference;
the error peaks at ~5e-5 on the early rows). rtol stays 1e-2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_query_heads": 64, "num_kv_heads": 8, "head_dim": 128},
    # Group size 8 as in the full shape.
    "small": {"batch": 1, "seq_len": 256, "num_query_heads": 16, "num_kv_heads": 2, "head_dim": 128},
}

CONFIG = {
    "name": "llama3_70b_sparse_attention",
    "model": "Llama-3.1-70B",
    "operator": "sparse_attention",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-4,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """q [B, Hq, S, D] ~ N(0,1)·D^-½ (scale in the dtype); k, v [B, Hkv, S, D] ~ N(0,1)·0.02."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3 = split(make_key(key, SEED), 3)
    b, s, hd = d["batch"], d["seq_len"], d["head_dim"]
    q = normal(k1, (b, d["num_query_heads"], s, hd), dtype, hd**-0.5)
    k = normal(k2, (b, d["num_kv_heads"], s, hd), dtype, 0.02)
    v = normal(k3, (b, d["num_kv_heads"], s, hd), dtype, 0.02)
    return q, k, v


def workload(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Causal GQA without further scaling; fill -1e30 (in the dtype); output [B, Hq, S, D]."""
    b, hq, s, hd = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, hq // hkv, s, hd)  # head h = kv_head * G + g
    scores = jnp.einsum("bhgqd,bhkd->bhgqk", qg, k)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, -1e30)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhgqk,bhkd->bhgqd", probs, v).reshape(b, hq, s, hd)


def get_flops(size: str = "full") -> int:
    """4·B·Hq·S²·D. (The original benchmark() formula omitted the batch factor.)"""
    d = SIZES[size]
    return 4 * d["batch"] * d["num_query_heads"] * d["seq_len"] ** 2 * d["head_dim"]
