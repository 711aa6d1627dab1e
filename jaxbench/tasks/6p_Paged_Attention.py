"""6p Paged_Attention: uniform decode attention over a paged KV cache (sheet §5, 6p).

One query token per sequence; sequence i's logical page j is physical page page_indices[i, j]. The mask
is a length mask (p < kv_lens[i]), not causal; with every kv_len at the maximum it masks nothing.

Tolerance: k, v ~ N(0,1)·0.02 over 4096 positions make the attention near-uniform and the output about
0.02/√4096 ≈ 3e-4, so the harness's atol = 1e-2 cannot tell a correct kernel from zeros. atol = 2e-5
is ~15x below the output scale (all-zeros fails), while a correct f32-softmax kernel uses under a
quarter of the bound (measured at 4096 positions against a NumPy f32 reference); rtol = 1e-2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {
        "num_seqs": 64,
        "num_query_heads": 64,
        "num_kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 256,
    },
    # Group size 8 and page size 16 as in the full shape; 256 tokens per sequence.
    "small": {
        "num_seqs": 8,
        "num_query_heads": 16,
        "num_kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 16,
    },
}
for _d in SIZES.values():
    _d["max_seq_len"] = _d["page_size"] * _d["pages_per_seq"]

CONFIG = {
    "name": "llama3_70b_paged_attention",
    "model": "Llama-3.1-70B",
    "operator": "paged_attention",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 2e-5,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """queries [N, Hq, D]; k_pages, v_pages [N·P, page, Hkv, D]; kv_lens [N]; page_indices [N, P];
    cu_q_lens [N+1]. keys[3] and keys[4] are unused, as in the sheet."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    keys = split(make_key(key, SEED), 5)
    n, pps = d["num_seqs"], d["pages_per_seq"]
    pages = (n * pps, d["page_size"], d["num_kv_heads"], d["head_dim"])
    queries = normal(keys[0], (n, d["num_query_heads"], d["head_dim"]), dtype)
    k_pages = normal(keys[1], pages, dtype, 0.02)
    v_pages = normal(keys[2], pages, dtype, 0.02)
    kv_lens = jnp.full((n,), d["max_seq_len"], dtype=jnp.int32)
    page_indices = jnp.arange(n * pps, dtype=jnp.int32).reshape(n, pps)
    cu_q_lens = jnp.arange(n + 1, dtype=jnp.int32)
    return queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens


def _one_seq(q_row, k_pages, v_pages, kv_len, pages, scale):
    """q_row [Hq, D] against the sequence's gathered pages; returns [Hq, D]."""
    _, page_size, hkv, hd = k_pages.shape
    k = k_pages[pages].reshape(-1, hkv, hd)  # [P·page, Hkv, D]
    v = v_pages[pages].reshape(-1, hkv, hd)
    q = q_row.reshape(hkv, -1, hd)  # head h = kv_head * G + g
    scores = jnp.einsum("hgd,phd->hgp", q, k) * scale
    valid = jnp.arange(k.shape[0]) < kv_len
    scores = jnp.where(valid, scores, -1e30)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("hgp,phd->hgd", probs, v).reshape(q_row.shape)


def workload(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens) -> jax.Array:
    """Decode attention for every sequence; output [N, Hq, D] in the queries' dtype."""
    scale = queries.shape[-1] ** -0.5
    q_rows = queries[cu_q_lens[:-1]]  # the one query token of each sequence
    fn = jax.vmap(_one_seq, in_axes=(0, None, None, 0, 0, None))
    return fn(q_rows, k_pages, v_pages, kv_lens, page_indices, scale)


def get_flops(size: str = "full") -> int:
    """num_seqs·Hq·4·max_seq_len·D (the baseline's own get_flops)."""
    d = SIZES[size]
    return d["num_seqs"] * d["num_query_heads"] * 4 * d["max_seq_len"] * d["head_dim"]
