"""Llama-3-8B decoder layer, one forward step over 8192 tokens (bf16).

RMSNorm -> GQA attention (32 query heads, 8 KV heads of 128, RoPE theta 500000, causal) -> residual ->
RMSNorm -> SwiGLU MLP 4096 -> 14336 -> 4096 -> residual. Each part sits in a `jax.named_scope`, as a
model library draws them; `hotspots` takes those as its regions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 1, "seq_len": 8192, "emb_dim": 4096, "num_heads": 32, "num_kv_heads": 8,
             "head_dim": 128, "mlp_dim": 14336},
    # 4 query heads per KV head of 128 and mlp_dim / emb_dim = 3.5, as at full size.
    "small": {"batch": 1, "seq_len": 128, "emb_dim": 512, "num_heads": 4, "num_kv_heads": 1,
              "head_dim": 128, "mlp_dim": 1792},
}  # fmt: skip

CONFIG = {
    "name": "llama3_8b_layer",
    "model": "Llama-3-8B",
    "operator": "decoder_layer",
    **SIZES["full"],
    "rope_theta": 500_000.0,
    "norm_eps": 1e-5,
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}

SEED = 42
HEAD_DIM = 128  # the same at every size: the weights' shapes then give the head counts
ROPE_THETA = CONFIG["rope_theta"]
NORM_EPS = CONFIG["norm_eps"]


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, S, E] ~ N(0,1); norm scales ~ 1 + N(0,1)·0.1; projections ~ N(0,1)·E^-1/2 (unit-variance outputs)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    ks = split(make_key(key, SEED), 10)
    e, m, hd = d["emb_dim"], d["mlp_dim"], d["head_dim"]
    q, kv = d["num_heads"] * hd, d["num_kv_heads"] * hd
    return (
        normal(ks[0], (d["batch"], d["seq_len"], e), dtype),
        1.0 + normal(ks[1], (e,), dtype, 0.1),  # attention_norm scale
        normal(ks[2], (e, q), dtype, e**-0.5),  # wq
        normal(ks[3], (e, kv), dtype, e**-0.5),  # wk
        normal(ks[4], (e, kv), dtype, e**-0.5),  # wv
        normal(ks[5], (q, e), dtype, q**-0.5),  # wo
        1.0 + normal(ks[6], (e,), dtype, 0.1),  # mlp_norm scale
        normal(ks[7], (e, m), dtype, e**-0.5),  # w_gate
        normal(ks[8], (e, m), dtype, e**-0.5),  # w_up
        normal(ks[9], (m, e), dtype, m**-0.5),  # w_down
    )


def rms_norm(x, scale):
    """In f32, as Llama does, then back to the activation dtype."""
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + NORM_EPS)
    return (xf * scale.astype(jnp.float32)).astype(x.dtype)


def rope(x, positions):
    """Rotary embedding on the two halves of each head (x [B, S, H, D]), angles in f32."""
    d = x.shape[-1]
    inv_freq = 1.0 / (ROPE_THETA ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    angles = positions[:, None].astype(jnp.float32) * inv_freq[None, :]  # [S, D/2]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention(x, wq, wk, wv, wo, *, num_heads: int, num_kv_heads: int):
    b, s, _ = x.shape
    hd = wq.shape[1] // num_heads
    with jax.named_scope("qkv_proj"):
        q = (x @ wq).reshape(b, s, num_heads, hd)
        k = (x @ wk).reshape(b, s, num_kv_heads, hd)
        v = (x @ wv).reshape(b, s, num_kv_heads, hd)
    with jax.named_scope("rope"):
        positions = jnp.arange(s)
        q, k = rope(q, positions), rope(k, positions)
    with jax.named_scope("sdpa"):
        g = num_heads // num_kv_heads
        q = q.reshape(b, s, num_kv_heads, g, hd)
        scores = jnp.einsum("bskgd,btkd->bkgst", q, k, preferred_element_type=jnp.float32) * hd**-0.5
        causal = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
        scores = jnp.where(causal, scores, -jnp.inf)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgst,btkd->bskgd", probs, v).reshape(b, s, num_heads * hd)
    with jax.named_scope("out_proj"):
        return out @ wo


def mlp(x, w_gate, w_up, w_down):
    return (jax.nn.silu(x @ w_gate) * (x @ w_up)) @ w_down


def workload(x, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down) -> jax.Array:
    """x + attention(norm(x)); then h + mlp(norm(h)). Output bf16 [B, S, E]."""
    num_heads, num_kv_heads = wq.shape[1] // HEAD_DIM, wk.shape[1] // HEAD_DIM
    with jax.named_scope("attention_norm"):
        a = rms_norm(x, attn_norm)
    with jax.named_scope("attention"):
        h = x + attention(a, wq, wk, wv, wo, num_heads=num_heads, num_kv_heads=num_kv_heads)
    with jax.named_scope("mlp_norm"):
        m = rms_norm(h, mlp_norm)
    with jax.named_scope("mlp"):
        return h + mlp(m, w_gate, w_up, w_down)


def get_flops(size: str = "full") -> int:
    """Projections 2·T·E·(2·Q + 2·KV), causal attention 2·2·B·H·S²·D / 2, MLP 6·T·E·M (matmuls only)."""
    d = SIZES[size]
    t = d["batch"] * d["seq_len"]
    q, kv = d["num_heads"] * d["head_dim"], d["num_kv_heads"] * d["head_dim"]
    proj = 2 * t * d["emb_dim"] * (2 * q + 2 * kv)
    attn = 2 * d["batch"] * d["num_heads"] * d["seq_len"] ** 2 * d["head_dim"]  # QK^T and PV, half each
    return proj + attn + 6 * t * d["emb_dim"] * d["mlp_dim"]
