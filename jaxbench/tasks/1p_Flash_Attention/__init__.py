"""1p Flash_Attention: causal multi-head attention, layout BHSD (JaxBench sheet §5, 1p).

The plain-JAX reference mirrors the bf16 graph: bf16 scores, a bf16-rounded scale, fill -1e9 (in bf16)
for masked entries, a bf16 softmax and a bf16 PV matmul with f32 accumulation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 64, "head_dim": 128},
    "small": {"batch": 1, "seq_len": 256, "num_heads": 2, "head_dim": 128},
}

CONFIG = {
    "name": "flash_attention_baseline",
    "model": "Baseline-MHA",
    "operator": "causal_mha",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """query, key, value: N(0,1), each [B, H, S, D]."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3 = split(make_key(key, SEED), 3)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    return normal(k1, shape, dtype), normal(k2, shape, dtype), normal(k3, shape, dtype)


def workload(query: jax.Array, key: jax.Array, value: jax.Array) -> jax.Array:
    """Causal softmax(q kᵀ / √D) v per (batch, head); output [B, H, S, D] in the input dtype."""
    seq_len, head_dim = query.shape[-2], query.shape[-1]
    scores = jnp.einsum("bhqd,bhkd->bhqk", query, key) * (head_dim**-0.5)  # scale rounds to the dtype
    causal = jnp.tril(jnp.ones((seq_len, seq_len), dtype=query.dtype)) != 0
    scores = jnp.where(causal, scores, -1e9)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, value)


def get_flops(size: str = "full") -> int:
    """4·B·H·S²·D: QKᵀ and PV, each 2·S²·D per head (the causal half is not discounted)."""
    d = SIZES[size]
    return 4 * d["batch"] * d["num_heads"] * d["seq_len"] ** 2 * d["head_dim"]
