"""Decode attention over a paged KV cache (grouped-query): per sequence, its pages gathered by
page_indices, positions past its length masked, softmax(q k^T) v without scaling (the caller scales q, as
jax's paged_attention expects). Written for the corpus."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "paged_attention", "model": "corpus", "operator": "attention", "atol": 3e-2, "rtol": 3e-2}
SIZES = {
    "full": {
        "batch": 32,
        "q_heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 128,
    },
    "small": {"batch": 2, "q_heads": 4, "kv_heads": 2, "head_dim": 128, "page_size": 16, "pages_per_seq": 8},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kq, kk, kv, kl, kp = jax.random.split(jax.random.key(0 if key is None else key), 5)
    dtype = dtype or jnp.bfloat16  # a bf16 KV cache, as served
    total = d["batch"] * d["pages_per_seq"]
    q = jax.random.normal(kq, (d["batch"], d["q_heads"], d["head_dim"]), dtype)
    k_pages = jax.random.normal(kk, (d["kv_heads"], total, d["page_size"], d["head_dim"]), dtype)
    v_pages = jax.random.normal(kv, (d["kv_heads"], total, d["page_size"], d["head_dim"]), dtype)
    max_len = d["page_size"] * d["pages_per_seq"]
    lengths = jax.random.randint(kl, (d["batch"],), 1, max_len + 1, dtype=jnp.int32)
    page_indices = jax.random.permutation(kp, total).reshape(d["batch"], d["pages_per_seq"]).astype(jnp.int32)
    return q, k_pages, v_pages, lengths, page_indices


def workload(q, k_pages, v_pages, lengths, page_indices):
    batch, q_heads, head_dim = q.shape
    kv_heads, _, page_size, _ = k_pages.shape
    k = k_pages[:, page_indices].reshape(kv_heads, batch, -1, head_dim)  # (kvh, b, seq, d)
    v = v_pages[:, page_indices].reshape(kv_heads, batch, -1, head_dim)
    qg = q.reshape(batch, kv_heads, q_heads // kv_heads, head_dim).astype(jnp.float32)
    s = jnp.einsum("bhgd,hbsd->bhgs", qg, k.astype(jnp.float32))
    valid = jnp.arange(k.shape[2])[None, :] < lengths[:, None]  # (b, seq)
    s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    o = jnp.einsum("bhgs,hbsd->bhgd", jax.nn.softmax(s, axis=-1), v.astype(jnp.float32))
    return o.reshape(batch, q_heads, head_dim).astype(q.dtype)
