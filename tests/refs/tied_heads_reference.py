"""Per-head scaling over hidden = heads x head_dim: three SIZES dims tied together (tests the derived size)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "tied_heads", "model": "test", "operator": "per_head_scale", "atol": 1e-5, "rtol": 1e-5}
SIZES = {
    "full": {"seq": 2048, "heads": 16, "head_dim": 128, "hidden": 2048},
    "small": {"seq": 64, "heads": 2, "head_dim": 64, "hidden": 128},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k1, k2 = jax.random.split(jax.random.key(0) if key is None else key)
    x = jax.random.normal(k1, (d["seq"], d["hidden"]), dtype or jnp.float32)
    w = jax.random.normal(k2, (d["heads"], d["head_dim"]), dtype or jnp.float32)
    return x, w


def workload(x, w):
    heads, head_dim = w.shape
    # the reshape is where the tie lives: hidden must equal heads x head_dim
    per_head = x.reshape(x.shape[0], heads, head_dim)
    return (per_head * w[None]).reshape(x.shape)
