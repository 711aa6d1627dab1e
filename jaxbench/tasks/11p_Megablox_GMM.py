"""11p Megablox_GMM: Qwen3-235B-A22B grouped matmul over contiguous row groups (sheet §5, 11p).

Row r of lhs belongs to group g(r), groups being consecutive row ranges of group_sizes[g] rows;
out[r] = lhs[r] @ rhs[g(r)], accumulated in f32 and rounded once to the dtype.

Defect fixed: the original passed max_expert_size as a 4th, *traced* Python int used as a shape, so
the baseline failed under ``jax.jit``. Here the inputs are the three arrays only. The workload uses
``jax.lax.ragged_dot``, which needs no static window; the uniform group size of a size
(``SIZES[size]["group_size"]`` = M / G) is recoverable from the shapes (lhs rows / rhs groups).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "emb_dim": 4096,
        "moe_mlp_dim": 1536,
        "seq_len": 4096,
    },
    # Group size 256 as in the full shape.
    "small": {"num_experts": 8, "num_experts_per_tok": 8, "emb_dim": 256, "moe_mlp_dim": 256, "seq_len": 256},
}
for _d in SIZES.values():
    _d["M"] = _d["seq_len"] * _d["num_experts_per_tok"]
    _d["group_size"] = _d["M"] // _d["num_experts"]

CONFIG = {
    "name": "megablox_gmm_qwen3_235b",
    "model": "Qwen3-235B-A22B",
    "operator": "grouped_matmul",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """lhs [M, K] ~ N(0,1); rhs [G, K, N] ~ N(0,1)·0.02; group_sizes [G] int32, all M / G."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2 = split(make_key(key, SEED), 2)
    lhs = normal(k1, (d["M"], d["emb_dim"]), dtype)
    rhs = normal(k2, (d["num_experts"], d["emb_dim"], d["moe_mlp_dim"]), dtype, 0.02)
    group_sizes = jnp.full((d["num_experts"],), d["group_size"], dtype=jnp.int32)
    return lhs, rhs, group_sizes


def workload(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """Grouped matmul; output [M, N] in lhs's dtype. Rows beyond Σ group_sizes are zero."""
    out = jax.lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32)
    return out.astype(lhs.dtype)


def get_flops(size: str = "full") -> int:
    """2·M·K·N (the baseline's own get_flops)."""
    d = SIZES[size]
    return 2 * d["M"] * d["emb_dim"] * d["moe_mlp_dim"]
