"""Gemma 2 from Google DeepMind's `gemma` library (2.0.8, its Flax linen `gemma.transformer`), unmodified.

A tiny config with Gemma 2's structure: local sliding-window and global attention alternating (the local
layers build their window with a `lax.cond`), attention logit soft-caps, GeGLU, pre- and post-norms, a
final logit soft-cap. Random small parameters (no weights are downloaded); a causal prompt: tokens,
positions 0..L-1 and the causal mask `gemma.transformer.make_causal_attn_mask` builds.
Install: see the Makefile's models stamp (`gemma==2.0.8` without its dependencies).
"""

import jax
import jax.numpy as jnp
from gemma import modules, transformer

from maxkernel.jaxbench.model_params import draw_like_init

SIZES = {
    "full": {
        "batch": 2,
        "seq": 1024,
        "vocab": 8192,
        "embed": 1024,
        "hidden": 4096,
    },
    "small": {
        "batch": 1,
        "seq": 128,
        "vocab": 512,
        "embed": 128,
        "hidden": 256,
    },
}
CONFIG = {"name": "gemma2", "dtype": "float32", "atol": 1e-4, "rtol": 1e-4}
LAYERS, HEADS, KV_HEADS, HEAD_DIM = 4, 4, 2, 64


def config(d):
    return transformer.TransformerConfig(
        num_layers=LAYERS,
        num_embed=d["vocab"],
        embed_dim=d["embed"],
        hidden_dim=d["hidden"],
        num_heads=HEADS,
        head_dim=HEAD_DIM,
        num_kv_heads=KV_HEADS,
        final_logit_softcap=30.0,
        use_post_attn_norm=True,
        use_post_ffw_norm=True,
        attention_types=(modules.AttentionType.LOCAL_SLIDING, modules.AttentionType.GLOBAL) * (LAYERS // 2),
        attn_logits_soft_cap=50.0,
        sliding_window_size=d["seq"] // 4,  # a quarter of the prompt: local layers see less
        max_cache_length=None,
    )


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    kt, kp = jax.random.split(key)
    tokens = jax.random.randint(kt, (d["batch"], d["seq"]), 1, d["vocab"], jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(d["seq"], dtype=jnp.int32), tokens.shape)
    mask = transformer.make_causal_attn_mask(tokens != 0)
    shapes = jax.eval_shape(
        lambda k: transformer.Transformer(config(d)).init(k, tokens, positions, None, mask), kp
    )
    params = draw_like_init(kp, shapes)  # never one constant: see its docstring
    return tokens, positions, mask, params


def workload(tokens, positions, mask, params):
    p = params["params"]
    vocab, embed = p["embedder"]["input_embedding"].shape
    d = {
        "seq": tokens.shape[1],
        "vocab": vocab,
        "embed": embed,
        "hidden": p["layer_0"]["mlp"]["linear"].shape[0],
    }
    logits, _ = transformer.Transformer(config(d)).apply(params, tokens, positions, None, mask)
    return logits
