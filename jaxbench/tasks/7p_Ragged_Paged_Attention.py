"""7p Ragged_Paged_Attention: mixed prefill + decode over a paged, head-interleaved KV cache (sheet §5, 7p).

Tokens of all sequences are packed along one axis (rows cu_q_lens[i] … cu_q_lens[i+1]-1). Each
sequence's query rows attend bottom-right-aligned causally to its kv_len cached positions. Scores and
softmax are f32; the PV matmul is in the cache dtype.

The per-sequence query capacity must be static for a traced workload: it is the size's fixed batch
layout (``SIZES[size]["q_lens"]``), recovered from the input shapes. cu_q_lens, kv_lens and num_seqs
stay traced inputs that decide offsets, masks and which rows count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

SIZES = {
    "full": {
        "max_num_batched_tokens": 4096,
        "max_num_seqs": 64,
        "num_q_heads": 64,
        "num_kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 256,
        # 48 decodes, 7 prefill chunks of 512, one of 464: Σ = 4096; slots 56…63 inactive.
        "q_lens": (1,) * 48 + (512,) * 7 + (464,),
        "kv_lens": tuple(257 + 16 * ((73 * i) % 240) for i in range(48))
        + (1023, 1535, 2047, 2559, 3071, 3583, 4095, 4095),
    },
    # Same shape of batch at 256 tokens: decodes end on partial pages, one slot inactive, group size 8.
    "small": {
        "max_num_batched_tokens": 256,
        "max_num_seqs": 8,
        "num_q_heads": 16,
        "num_kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 16,
        "q_lens": (1, 1, 1, 1, 96, 96, 60),
        "kv_lens": (49, 113, 177, 241, 127, 191, 255),
    },
}

CONFIG = {
    "name": "ragged_paged_attention_llama70b",
    "model": "Llama-3.1-70B",
    "operator": "ragged_paged_attention",
    **{k: v for k, v in SIZES["full"].items() if k not in ("q_lens", "kv_lens")},
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """q [T, Hq, D]; kv_pages [pages, page, 2·Hkv, D] (2g = K, 2g+1 = V of KV head g); kv_lens [S];
    page_indices [S, P] (a random permutation of all pages); cu_q_lens [S+1]; num_seqs [1]."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3 = split(make_key(key, SEED), 3)
    slots, pps, active = d["max_num_seqs"], d["pages_per_seq"], len(d["q_lens"])
    q = normal(k1, (d["max_num_batched_tokens"], d["num_q_heads"], d["head_dim"]), dtype)
    kv_pages = normal(k2, (slots * pps, d["page_size"], 2 * d["num_kv_heads"], d["head_dim"]), dtype)
    pad = slots - active
    kv_lens = jnp.asarray(d["kv_lens"] + (0,) * pad, dtype=jnp.int32)
    page_indices = jax.random.permutation(k3, slots * pps).astype(jnp.int32).reshape(slots, pps)
    cu = np.concatenate([[0], np.cumsum(d["q_lens"])])
    cu_q_lens = jnp.asarray(np.concatenate([cu, np.full(pad, cu[-1])]), dtype=jnp.int32)
    num_seqs = jnp.asarray([active], dtype=jnp.int32)
    return q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs


def _static_q_lens(num_tokens: int, max_num_seqs: int) -> tuple[int, ...]:
    for d in SIZES.values():
        if (d["max_num_batched_tokens"], d["max_num_seqs"]) == (num_tokens, max_num_seqs):
            return d["q_lens"]
    raise ValueError(
        f"no 7p batch layout for {num_tokens} tokens and {max_num_seqs} sequence slots; "
        f"known sizes: {sorted(SIZES)}"
    )


def workload(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs) -> jax.Array:
    """Ragged paged attention; output [T, Hq, D] in q's dtype, each packed row written once."""
    num_tokens, hq, hd = q.shape
    hkv = kv_pages.shape[2] // 2
    out = jnp.zeros_like(q)
    for i, cap in enumerate(_static_q_lens(num_tokens, page_indices.shape[0])):
        start, kv_len = cu_q_lens[i], kv_lens[i]
        q_len = cu_q_lens[i + 1] - start
        t = jnp.arange(cap)
        rows = jnp.minimum(start + t, num_tokens - 1)
        qi = q[rows].reshape(cap, hkv, hq // hkv, hd)  # head h = kv_head * G + g
        kv = kv_pages[page_indices[i]].reshape(-1, 2 * hkv, hd)  # [P·page, 2·Hkv, D]
        k, v = kv[:, 0::2], kv[:, 1::2]
        scores = jnp.einsum("thgd,phd->hgtp", qi, k, preferred_element_type=jnp.float32) * (hd**-0.5)
        p = jnp.arange(kv.shape[0])
        masked = (p[None, :] > kv_len - q_len + t[:, None]) | (p[None, :] >= kv_len)
        scores = jnp.where(masked, MASK_VALUE, scores)
        probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
        o = jnp.einsum("hgtp,phd->thgd", probs, v).reshape(cap, hq, hd)
        live = (t < q_len) & (i < num_seqs[0])
        out = out.at[rows].add(jnp.where(live[:, None, None], o, 0))
    return out


def get_flops(size: str = "full") -> int:
    """Hq·4·D·Σ q_len·kv_len (the baseline's own get_flops)."""
    d = SIZES[size]
    work = sum(ql * kl for ql, kl in zip(d["q_lens"], d["kv_lens"], strict=True))
    return d["num_q_heads"] * 4 * d["head_dim"] * work
