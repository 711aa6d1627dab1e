"""Ragged paged attention (mixed prefill and decode, vLLM-style): sequences of ragged query lengths
(cu_q_lens) attend causally to their own KV pages (page_indices, kv_lens), K and V interleaved along the
combined head axis (even heads K, odd heads V), grouped-query, scores scaled by 1/sqrt(head_dim).
Each query token sits at the end of its sequence's KV (position kv_len - q_len + its index). Written for
the corpus: the baseline for jax's ragged_paged_attention."""

import math

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "ragged_paged_attention",
    "model": "corpus",
    "operator": "attention",
    "atol": 3e-2,
    "rtol": 3e-2,
}
SIZES = {
    "full": {
        "seqs": 16,
        "q_per_seq": 64,
        "q_heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 64,
    },
    "small": {
        "seqs": 2,
        "q_per_seq": 16,
        "q_heads": 4,
        "kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 8,
    },
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    seqs, q_per_seq = d["seqs"], d["q_per_seq"]
    max_kv = d["page_size"] * d["pages_per_seq"]
    if 2 * q_per_seq > max_kv:
        raise ValueError(f"2 x q_per_seq={q_per_seq} should fit in page_size x pages_per_seq={max_kv}")
    kq, kk, kd, kl, kp = jax.random.split(jax.random.key(0 if key is None else key), 5)
    dtype = dtype or jnp.bfloat16
    tokens = seqs * q_per_seq
    q = jax.random.normal(kq, (tokens, d["q_heads"], d["head_dim"]), dtype)
    total_pages = seqs * d["pages_per_seq"]
    kv_pages = jax.random.normal(kk, (total_pages, d["page_size"], 2 * d["kv_heads"], d["head_dim"]), dtype)
    # ragged query lengths summing to all the tokens: pairs trade rows (q_per_seq +- shift, from 1 to
    # 2 q_per_seq - 1), an odd last sequence keeps q_per_seq
    shift = jax.random.randint(kd, (seqs // 2,), 0, q_per_seq)
    q_lens = jnp.full((seqs,), q_per_seq, jnp.int32)
    q_lens = q_lens.at[0 : 2 * (seqs // 2) : 2].add(shift).at[1 : 2 * (seqs // 2) : 2].add(-shift)
    cu_q_lens = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(q_lens)]).astype(jnp.int32)
    kv_lens = jax.random.randint(kl, (seqs,), q_lens, max_kv + 1).astype(jnp.int32)
    page_indices = jax.random.permutation(kp, total_pages).reshape(seqs, d["pages_per_seq"]).astype(jnp.int32)
    num_seqs = jnp.array([seqs], jnp.int32)
    return q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs


def workload(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    tokens, q_heads, head_dim = q.shape
    _, page_size, combined, _ = kv_pages.shape
    kv_heads = combined // 2
    pages = kv_pages[page_indices]  # (seqs, pages_per_seq, page_size, 2 kv_heads, head_dim)
    kv = pages.reshape(page_indices.shape[0], -1, combined, head_dim).astype(jnp.float32)
    k, v = kv[:, :, 0::2], kv[:, :, 1::2]  # (seqs, kv_len_max, kv_heads, head_dim)
    tok = jnp.arange(tokens)
    seq = jnp.searchsorted(cu_q_lens[1:], tok, side="right")  # the sequence each token belongs to
    q_len = (cu_q_lens[1:] - cu_q_lens[:-1])[seq]
    pos = kv_lens[seq] - q_len + (tok - cu_q_lens[seq])  # the token's position in its sequence
    qg = q.reshape(tokens, kv_heads, q_heads // kv_heads, head_dim).astype(jnp.float32)
    s = jnp.einsum("thgd,tlhd->thgl", qg, k[seq]) / math.sqrt(head_dim)
    col = jnp.arange(k.shape[1])[None, :]
    valid = (col < kv_lens[seq][:, None]) & (col <= pos[:, None])  # (tokens, kv_len_max)
    s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    o = jnp.einsum("thgl,tlhd->thgd", jax.nn.softmax(s, axis=-1), v[seq])
    return o.reshape(tokens, q_heads, head_dim).astype(q.dtype)
