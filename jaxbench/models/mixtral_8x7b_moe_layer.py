"""Mixtral-8x7B mixture-of-experts layer, one forward step over 8192 tokens (bf16).

A router (f32 logits), top-2 of 8 experts with softmax weights over the two, and the dropless dispatch a
production stack uses: sort the (token, expert) pairs by expert, run each SwiGLU expert 4096 -> 14336 ->
4096 as a grouped matmul (`lax.ragged_dot`) over its contiguous rows, unsort and combine. Each expert does
only the work of the tokens routed to it (unlike the dense 10p reference). Named scopes mark the parts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 1, "seq_len": 8192, "emb_dim": 4096, "mlp_dim": 14336, "num_experts": 8, "top_k": 2},
    # 8 experts, top-2 and mlp_dim / emb_dim = 3.5, as at full size.
    "small": {"batch": 1, "seq_len": 128, "emb_dim": 256, "mlp_dim": 896, "num_experts": 8, "top_k": 2},
}

CONFIG = {
    "name": "mixtral_8x7b_moe_layer",
    "model": "Mixtral-8x7B",
    "operator": "moe_layer",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}

SEED = 42
TOP_K = 2


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, S, E] ~ N(0,1); router [E, N] and experts ~ N(0,1)·fan_in^-1/2 (unit-variance outputs)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    ks = split(make_key(key, SEED), 5)
    e, m, n = d["emb_dim"], d["mlp_dim"], d["num_experts"]
    return (
        normal(ks[0], (d["batch"], d["seq_len"], e), dtype),
        normal(ks[1], (e, n), dtype, e**-0.5),  # router
        normal(ks[2], (n, e, m), dtype, e**-0.5),  # expert gate projections
        normal(ks[3], (n, e, m), dtype, e**-0.5),  # expert up projections
        normal(ks[4], (n, m, e), dtype, m**-0.5),  # expert down projections
    )


def workload(x, router, w_gate, w_up, w_down) -> jax.Array:
    """Σ_k w_k · expert_{e_k}(x) over the top-2 experts e_k of each token. Output bf16 [B, S, E]."""
    b, s, e = x.shape
    n = router.shape[1]
    tokens = x.reshape(b * s, e)
    with jax.named_scope("router"):
        logits = jnp.dot(tokens, router, preferred_element_type=jnp.float32)  # [T, N]
        top_logits, top_expert = jax.lax.top_k(logits, TOP_K)  # [T, K]
        weights = jax.nn.softmax(top_logits, axis=-1)  # f32 [T, K]
    with jax.named_scope("dispatch"):
        flat_expert = top_expert.reshape(-1)  # [T*K]: pair i is token i // K
        order = jnp.argsort(flat_expert, stable=True)
        rows = jnp.take(tokens, order // TOP_K, axis=0)  # [T*K, E], grouped by expert
        group_sizes = jnp.bincount(flat_expert, length=n).astype(jnp.int32)
    with jax.named_scope("experts"):
        gate = jax.lax.ragged_dot(rows, w_gate, group_sizes)  # [T*K, M]
        up = jax.lax.ragged_dot(rows, w_up, group_sizes)
        out = jax.lax.ragged_dot(jax.nn.silu(gate) * up, w_down, group_sizes)  # [T*K, E]
    with jax.named_scope("combine"):
        out = jnp.take(out, jnp.argsort(order), axis=0).reshape(b * s, TOP_K, e)  # back in token order
        y = jnp.sum(out.astype(jnp.float32) * weights[..., None], axis=1)
        return y.astype(x.dtype).reshape(b, s, e)


def get_flops(size: str = "full") -> int:
    """Routing 2·T·E·N plus each token's K experts, 6·E·M each (matmuls only)."""
    d = SIZES[size]
    t = d["batch"] * d["seq_len"]
    return 2 * t * d["emb_dim"] * d["num_experts"] + t * d["top_k"] * 6 * d["emb_dim"] * d["mlp_dim"]
