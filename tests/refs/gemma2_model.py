"""Gemma 2 from Google DeepMind's `gemma` library (2.0.8, its Flax linen `gemma.transformer`), unmodified.

A tiny config with Gemma 2's structure: local sliding-window and global attention alternating (the local
layers build their window with a `lax.cond`), attention logit soft-caps, GeGLU, pre- and post-norms, a
final logit soft-cap. Random small parameters (no weights are downloaded); a causal prompt: tokens,
positions 0..L-1 and the causal mask `gemma.transformer.make_causal_attn_mask` builds.
Install: see the Makefile's models stamp (`gemma==2.0.8` without its dependencies).
"""

import jax
import jax.numpy as jnp
import numpy as np
from gemma import modules, transformer

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


def _draw(key, shapes):
    """Parameters shaped like the library's init (traced abstractly: cheap), drawn here: N(0, 1/fan_in) for
    weights, N(0, 0.1) for vectors (biases and norm scales, which the library starts at one constant, so a
    kernel that drops one fails). With a concrete key, numpy draws them: no XLA compile per shape on CPU."""
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    std = [s.shape[-2] ** -0.5 if len(s.shape) >= 2 else 0.1 for s in leaves]
    if isinstance(key, jax.core.Tracer):
        ks = jax.random.split(key, len(leaves))
        out = [sd * jax.random.normal(k, s.shape, s.dtype) for k, s, sd in zip(ks, leaves, std, strict=True)]
    else:
        rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
        out = [
            jnp.asarray(sd * rng.standard_normal(s.shape), s.dtype) for s, sd in zip(leaves, std, strict=True)
        ]
    return jax.tree_util.tree_unflatten(tree, out)


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
    params = _draw(kp, shapes)
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
