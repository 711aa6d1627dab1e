"""3p MLA_Attention: DeepSeek-V3 multi-head latent attention, projections included (sheet §5, 3p).

Every matmul is bf16 in / bf16 out (f32 accumulation). RoPE is rotate-half over the 64 rope dims, with
cos/sin computed in f32 and cast to the activation dtype; the rope key is shared by all heads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

_HEAD_DIMS = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}

SIZES = {
    "full": {
        "batch": 4,
        "seq_len": 2048,
        "emb_dim": 7168,
        "num_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        **_HEAD_DIMS,
    },
    "small": {
        "batch": 1,
        "seq_len": 256,
        "emb_dim": 512,
        "num_heads": 4,
        "q_lora_rank": 256,
        "kv_lora_rank": 128,
        **_HEAD_DIMS,
    },
}

CONFIG = {
    "name": "deepseek_v3_mla",
    "model": "DeepSeek-V3-671B",
    "operator": "mla_attention",
    **SIZES["full"],
    "rope_theta": 10000,
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42
_NOPE, _ROPE, _VD = 128, 64, 128


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, S, E] ~ N(0,1) and six projection weights ~ N(0,1)·0.02 (keys[7] unused, as in the sheet)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    keys = split(make_key(key, SEED), 8)
    e, h, ql, kvl = d["emb_dim"], d["num_heads"], d["q_lora_rank"], d["kv_lora_rank"]
    x = normal(keys[0], (d["batch"], d["seq_len"], e), dtype)
    q_down = normal(keys[1], (e, ql), dtype, 0.02)
    q_up = normal(keys[2], (ql, h * (_NOPE + _ROPE)), dtype, 0.02)
    kv_down = normal(keys[3], (e, kvl + _ROPE), dtype, 0.02)
    k_up = normal(keys[4], (kvl, h * _NOPE), dtype, 0.02)
    v_up = normal(keys[5], (kvl, h * _VD), dtype, 0.02)
    o_proj = normal(keys[6], (h * _VD, e), dtype, 0.02)
    return x, q_down, q_up, kv_down, k_up, v_up, o_proj


def _rope(z: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate-half RoPE on the last axis (64); cos/sin are [S, 32] and broadcast over heads."""
    half = z.shape[-1] // 2
    u, w = z[..., :half], z[..., half:]
    return jnp.concatenate([u * cos - w * sin, w * cos + u * sin], axis=-1)


def workload(x, q_down, q_up, kv_down, k_up, v_up, o_proj) -> jax.Array:
    """MLA forward; output [B, S, E] in x's dtype."""
    b, s, _ = x.shape
    kvl = k_up.shape[0]
    h = k_up.shape[1] // _NOPE
    q = ((x @ q_down) @ q_up).reshape(b, s, h, _NOPE + _ROPE)
    q_nope, q_pe = q[..., :_NOPE], q[..., _NOPE:]
    ckv = x @ kv_down  # [B, S, kv_lora + 64]
    latent, k_pe = ckv[..., :kvl], ckv[..., kvl:]
    k_nope = (latent @ k_up).reshape(b, s, h, _NOPE)
    v = (latent @ v_up).reshape(b, s, h, _VD)

    freqs = 1.0 / (CONFIG["rope_theta"] ** (jnp.arange(0, _ROPE, 2, dtype=jnp.float32) / _ROPE))
    angles = jnp.arange(s, dtype=jnp.float32)[:, None] * freqs[None, :]  # [S, 32]
    cos, sin = jnp.cos(angles).astype(x.dtype)[:, None, :], jnp.sin(angles).astype(x.dtype)[:, None, :]
    q_pe = _rope(q_pe, cos, sin)  # [B, S, H, 64]
    k_pe = jnp.broadcast_to(_rope(k_pe[:, :, None, :], cos, sin), (b, s, h, _ROPE))

    q_full = jnp.concatenate([q_nope, q_pe], axis=-1)  # [B, S, H, 192]
    k_full = jnp.concatenate([k_nope, k_pe], axis=-1)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q_full, k_full) * ((_NOPE + _ROPE) ** -0.5)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, -1e9)
    probs = jax.nn.softmax(scores, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, h * _VD)  # head-major flatten
    return o @ o_proj


def get_flops(size: str = "full") -> int:
    """Projections plus attention. Unlike the original benchmark() formula (which counts the PV term
    with head dim 192), PV is counted with v_head_dim = 128: 2·B·H·S²·(192 + 128)."""
    d = SIZES[size]
    b, s, e, h, ql, kvl = (
        d[k] for k in ("batch", "seq_len", "emb_dim", "num_heads", "q_lora_rank", "kv_lora_rank")
    )
    qk = _NOPE + _ROPE
    proj = (
        2 * b * s * (e * ql + ql * h * qk + e * (kvl + _ROPE) + kvl * h * _NOPE + kvl * h * _VD + h * _VD * e)
    )
    attn = 2 * b * h * s * s * (qk + _VD)
    return proj + attn
