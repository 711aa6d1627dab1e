"""A decoder whose layers are one lax.scan over stacked weights (the way MaxText or nn.scan write them), with
named scopes inside the scanned body, and a named unembedding after it."""

import jax
import jax.numpy as jnp

SIZES = {
    "full": {"batch": 2, "seq": 512, "d": 512, "heads": 8, "layers": 3},
    "small": {"batch": 1, "seq": 32, "d": 64, "heads": 2, "layers": 3},
}
CONFIG = {"name": "scanned_layers", "dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}


def create_inputs(dtype=None, *, key=None, size="full"):
    c = SIZES[size]
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ks = jax.random.split(key, 4)
    d, n = c["d"], c["layers"]
    x = jax.random.normal(ks[0], (c["batch"], c["seq"], d)).astype(jnp.bfloat16)
    wqkv = (jax.random.normal(ks[1], (n, d, 3 * d)) * d**-0.5).astype(jnp.bfloat16)
    w_mlp = (jax.random.normal(ks[2], (n, d, d)) * d**-0.5).astype(jnp.bfloat16)
    heads = jnp.zeros((c["heads"],), jnp.int8)  # carries the head count in its shape
    return x, wqkv, w_mlp, heads


def workload(x, wqkv, w_mlp, heads):
    b, s, d = x.shape
    h = heads.shape[0]

    def layer(x, w):
        qkv_w, mlp_w = w
        with jax.named_scope("attn"):
            q, k, v = (t.reshape(b, s, h, d // h) for t in jnp.split(x @ qkv_w, 3, axis=-1))
            sc = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * (d // h) ** -0.5
            p = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((s, s), bool)), sc, -1e30), axis=-1)
            x = x + jnp.einsum("bhqk,bkhd->bqhd", p.astype(x.dtype), v).reshape(b, s, d)
        with jax.named_scope("mlp"):
            x = x + jax.nn.relu(x @ mlp_w)
        return x, jnp.mean(x.astype(jnp.float32))

    x, means = jax.lax.scan(layer, x, (wqkv, w_mlp))
    with jax.named_scope("head"):
        return x * means.sum().astype(x.dtype)
