"""16p Mamba2_SSD: Mamba-2-2.7B state-space duality in its full quadratic (matrix) form (sheet §5, 16p).

a = σ(A_log) (the original docstring said exp; the code is a sigmoid), L[i, j] = Π_{k=j+1..i}(a_k + 1e-8)
for j ≤ i, rows normalised by max(|Σ_j Sc_ij|, 1). There is no chunking. Everything is float32 until the
final PV matmul, which runs in the dtype. A_log is float32 whatever the requested dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 64, "head_dim": 64},
    "small": {"batch": 1, "seq_len": 256, "num_heads": 4, "head_dim": 64},
}

CONFIG = {
    "name": "mamba2_2_7b_ssd",
    "model": "Mamba-2-2.7B",
    "operator": "state_space_duality",
    **SIZES["full"],
    "d_state": 128,  # unused by the workload
    "d_model": 2560,  # unused by the workload
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """query (C), key (B), value (x) [B, H, S, D] ~ N(0,1); A_log [B, H, S] f32 ~ N(0,1)·0.5 − 4.
    keys[4] is unused, as in the sheet."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    keys = split(make_key(key, SEED), 5)
    shape = (d["batch"], d["num_heads"], d["seq_len"], d["head_dim"])
    q, k, v = (normal(keys[i], shape, dtype) for i in range(3))
    a_log = normal(keys[3], shape[:3], jnp.float32, 0.5) - 4.0
    return q, k, v, a_log


def workload(query: jax.Array, key: jax.Array, value: jax.Array, a_log: jax.Array) -> jax.Array:
    """Decay-masked scores normalised by their signed row sum; output [B, H, S, D] in the dtype."""
    s = query.shape[2]
    cum = jnp.cumsum(jnp.log(jax.nn.sigmoid(a_log.astype(jnp.float32)) + 1e-8), axis=-1)  # [B, H, S]
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    diff = cum[..., :, None] - cum[..., None, :]
    decay = jnp.exp(jnp.where(causal, diff, -1e30))  # exactly 0 above the diagonal
    scores = jnp.einsum("bhqd,bhkd->bhqk", query.astype(jnp.float32), key.astype(jnp.float32)) * decay
    row = jnp.sum(scores, axis=-1, keepdims=True)
    row = jnp.where(jnp.abs(row) < 1e-6, 1.0, row)
    norm = jnp.maximum(jnp.abs(row), 1.0)
    return jnp.einsum("bhqk,bhkd->bhqd", (scores / norm).astype(value.dtype), value)


def get_flops(size: str = "full") -> int:
    """2·B·H·S²·D for each of the two matmuls."""
    d = SIZES[size]
    return 4 * d["batch"] * d["num_heads"] * d["seq_len"] ** 2 * d["head_dim"]
