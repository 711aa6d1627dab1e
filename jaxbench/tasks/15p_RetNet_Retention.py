"""15p RetNet_Retention: RetNet-6.7B parallel multi-scale retention (sheet §5, 15p).

Per head h the decay is γ_h = 1 − 2^(−5−h). Scores and decay are float32; rows are normalised by
max(Σ_j |A_ij|, 1) (not RetNet's GroupNorm); only the final PV matmul runs in the dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 16, "head_dim": 256},
    "small": {"batch": 1, "seq_len": 256, "num_heads": 4, "head_dim": 256},
}

CONFIG = {
    "name": "retnet_6_7b_retention",
    "model": "RetNet-6.7B",
    "operator": "multi_scale_retention",
    **SIZES["full"],
    "d_model": 4096,  # unused by the workload
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """query, key, value [B, H, S, D] ~ N(0,1)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    keys = split(make_key(key, SEED), 3)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    return tuple(normal(k, shape, dtype) for k in keys)


def workload(query: jax.Array, key: jax.Array, value: jax.Array) -> jax.Array:
    """Retention with per-head exponential decay; output [B, H, S, D] in the dtype."""
    h, s = query.shape[1], query.shape[2]
    gamma = 1.0 - 2.0 ** (-5.0 - jnp.arange(h, dtype=jnp.float32))  # [H]
    i = jnp.arange(s)[:, None]
    j = jnp.arange(s)[None, :]
    dist = jnp.maximum(i - j, 0).astype(jnp.float32)
    decay = jnp.exp(jnp.log(gamma)[:, None, None] * dist) * (i >= j)  # [H, S, S] f32
    scores = jnp.einsum("bhqd,bhkd->bhqk", query.astype(jnp.float32), key.astype(jnp.float32)) * decay
    norm = jnp.maximum(jnp.sum(jnp.abs(scores), axis=-1, keepdims=True), 1.0)
    return jnp.einsum("bhqk,bhkd->bhqd", (scores / norm).astype(value.dtype), value)


def get_flops(size: str = "full") -> int:
    """2·B·H·S²·D for each of the two matmuls."""
    d = SIZES[size]
    return 4 * d["batch"] * d["num_heads"] * d["seq_len"] ** 2 * d["head_dim"]
