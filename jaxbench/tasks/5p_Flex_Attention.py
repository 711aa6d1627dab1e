"""5p Flex_Attention: causal MHA with a dense per-head additive score bias (sheet §5, 5p).

The bias is i.i.d. random (not ALiBi, whatever the original comment said), shared across the batch and
added in the dtype *before* the causal mask.

Tolerance: k, v ~ N(0,1)·0.02 give near-uniform attention, so row i has magnitude about 0.02/√(i+1)
(≈3e-4 at the end of S = 4096) and the harness's atol = 1e-2 lets an all-zeros output pass most rows.
atol = 1e-4 is ~3x below the smallest row scale (all-zeros fails), and a correct f32-softmax kernel stays
within half of the bound at S = 4096 (measured against a NumPy f32 reference); rtol = 1e-2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 64, "head_dim": 128},
    "small": {"batch": 1, "seq_len": 256, "num_heads": 4, "head_dim": 128},
}

CONFIG = {
    "name": "llama3_70b_flex_attention",
    "model": "Llama-3.1-70B",
    "operator": "flex_attention",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-4,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """q ~ N(0,1), k, v ~ N(0,1)·0.02, each [B, H, S, D]; rel_pos_bias [H, S, S] ~ N(0,1)·0.01."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3, k4 = split(make_key(key, SEED), 4)
    b, h, s, hd = d["batch"], d["num_heads"], d["seq_len"], d["head_dim"]
    q = normal(k1, (b, h, s, hd), dtype)
    k = normal(k2, (b, h, s, hd), dtype, 0.02)
    v = normal(k3, (b, h, s, hd), dtype, 0.02)
    bias = normal(k4, (h, s, s), dtype, 0.01)
    return q, k, v, bias


def workload(q: jax.Array, k: jax.Array, v: jax.Array, rel_pos_bias: jax.Array) -> jax.Array:
    """softmax(q kᵀ·D^-½ + bias, causal) v; output [B, H, S, D]."""
    s, hd = q.shape[-2], q.shape[-1]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * (hd**-0.5) + rel_pos_bias[None]
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, -1e30)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v)


def get_flops(size: str = "full") -> int:
    """4·B·H·S²·D for the two matmuls plus B·H·S² for the bias add."""
    d = SIZES[size]
    b, h, s, hd = d["batch"], d["num_heads"], d["seq_len"], d["head_dim"]
    return 4 * b * h * s * s * hd + b * h * s * s
