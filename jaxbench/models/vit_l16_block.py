"""ViT-L/16 encoder block at 384x384 (576 patch tokens), batch 16, one forward step (bf16).

Another family than the decoders: pre-LayerNorm with bias, 16 heads of 64, bidirectional attention,
a GELU MLP 1024 -> 4096 -> 1024 with biases. Written as plain functions without named scopes, the way
much model code is, so `hotspots` has to find the regions by pattern.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 16, "seq_len": 576, "emb_dim": 1024, "num_heads": 16, "head_dim": 64, "mlp_dim": 4096},
    # heads of 64 and mlp_dim = 4 · emb_dim, as at full size.
    "small": {"batch": 2, "seq_len": 64, "emb_dim": 256, "num_heads": 4, "head_dim": 64, "mlp_dim": 1024},
}

CONFIG = {
    "name": "vit_l16_block",
    "model": "ViT-L/16 (384x384)",
    "operator": "encoder_block",
    **SIZES["full"],
    "norm_eps": 1e-6,
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}

SEED = 42
HEAD_DIM = 64
NORM_EPS = CONFIG["norm_eps"]


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, S, E] ~ N(0,1); LayerNorm scales ~ 1 + N·0.1, biases ~ N·0.02; weights ~ N·fan_in^-1/2."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    ks = split(make_key(key, SEED), 13)
    e, m = d["emb_dim"], d["mlp_dim"]
    return (
        normal(ks[0], (d["batch"], d["seq_len"], e), dtype),
        1.0 + normal(ks[1], (e,), dtype, 0.1),  # ln1 scale
        normal(ks[2], (e,), dtype, 0.02),  # ln1 bias
        normal(ks[3], (e, 3 * e), dtype, e**-0.5),  # w_qkv
        normal(ks[4], (3 * e,), dtype, 0.02),  # b_qkv
        normal(ks[5], (e, e), dtype, e**-0.5),  # w_out
        normal(ks[6], (e,), dtype, 0.02),  # b_out
        1.0 + normal(ks[7], (e,), dtype, 0.1),  # ln2 scale
        normal(ks[8], (e,), dtype, 0.02),  # ln2 bias
        normal(ks[9], (e, m), dtype, e**-0.5),  # w_fc1
        normal(ks[10], (m,), dtype, 0.02),  # b_fc1
        normal(ks[11], (m, e), dtype, m**-0.5),  # w_fc2
        normal(ks[12], (e,), dtype, 0.02),  # b_fc2
    )


def layer_norm(x, scale, bias):
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + NORM_EPS)
    return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def self_attention(x, w_qkv, b_qkv, w_out, b_out):
    b, s, e = x.shape
    h = e // HEAD_DIM
    qkv = (x @ w_qkv + b_qkv).reshape(b, s, 3, h, HEAD_DIM)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bshd,bthd->bhst", q, k, preferred_element_type=jnp.float32) * HEAD_DIM**-0.5
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bhst,bthd->bshd", probs, v).reshape(b, s, e)
    return out @ w_out + b_out


def workload(x, ln1_s, ln1_b, w_qkv, b_qkv, w_out, b_out, ln2_s, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2):
    """x + attn(LN(x)); then h + MLP(LN(h)) with exact (erf) GELU. Output bf16 [B, S, E]."""
    h = x + self_attention(layer_norm(x, ln1_s, ln1_b), w_qkv, b_qkv, w_out, b_out)
    y = layer_norm(h, ln2_s, ln2_b)
    return h + jax.nn.gelu(y @ w_fc1 + b_fc1, approximate=False) @ w_fc2 + b_fc2


def get_flops(size: str = "full") -> int:
    """QKV 6·T·E², out 2·T·E², attention 4·B·S²·E, MLP 4·T·E·M (matmuls only)."""
    d = SIZES[size]
    t, e = d["batch"] * d["seq_len"], d["emb_dim"]
    return 8 * t * e * e + 4 * d["batch"] * d["seq_len"] ** 2 * e + 4 * t * e * d["mlp_dim"]
