"""Spot-check the p tasks' math against independent NumPy float32 formulations.

Inputs are the tasks' own ``size="small"`` inputs, created in float32 so the comparison tests the math
rather than bf16 rounding. For the weak-check tasks (4p, 5p, 6p) a second test checks, on bf16 inputs,
that the task's tightened tolerance accepts an f32 answer and rejects an all-zeros one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest_paths import by_weight

from maxkernel.jaxbench.registry import load_task


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _causal_attention(q, k, v, scale, bias=None):
    """q [..., Sq, D], k/v [..., S, D]; bottom-right-aligned causal mask."""
    s = np.einsum("...qd,...kd->...qk", q, k) * scale
    if bias is not None:
        s = s + bias
    sq, sk = s.shape[-2:]
    keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
    return np.einsum("...qk,...kd->...qd", _softmax(np.where(keep, s, -np.inf)), v)


def _np(xs):
    return [
        np.asarray(x, dtype=np.float32) if jnp.issubdtype(x.dtype, jnp.floating) else np.asarray(x)
        for x in xs
    ]


def ref_1p(q, k, v):
    return _causal_attention(q, k, v, q.shape[-1] ** -0.5)


def ref_2p(q, k, v):  # BSHD, head h reads KV head h // G
    g = q.shape[2] // k.shape[2]
    kk, vv = (np.repeat(x, g, axis=2).transpose(0, 2, 1, 3) for x in (k, v))
    return _causal_attention(q.transpose(0, 2, 1, 3), kk, vv, q.shape[-1] ** -0.5).transpose(0, 2, 1, 3)


def ref_3p(x, q_down, q_up, kv_down, k_up, v_up, o_proj):
    b, s, _ = x.shape
    h = k_up.shape[1] // 128
    q = (x @ q_down @ q_up).reshape(b, s, h, 192)
    ckv = x @ kv_down
    c, kpe = ckv[..., :-64], ckv[..., -64:]
    pos = np.arange(s, dtype=np.float64)[:, None]
    ang = pos * (1.0 / 10000 ** (np.arange(32) * 2 / 64))[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(z):
        u, w = z[..., :32], z[..., 32:]
        return np.concatenate([u * cos - w * sin, w * cos + u * sin], -1)

    qf = np.concatenate([q[..., :128], rope(q[..., 128:])], -1)
    kf = np.concatenate([(c @ k_up).reshape(b, s, h, 128), np.repeat(rope(kpe[:, :, None]), h, 2)], -1)
    v = (c @ v_up).reshape(b, s, h, 128)
    t = (0, 2, 1, 3)
    o = _causal_attention(qf.transpose(t), kf.transpose(t), v.transpose(t), 192**-0.5)
    return o.transpose(t).reshape(b, s, -1) @ o_proj


def ref_4p(q, k, v):
    g = q.shape[1] // k.shape[1]
    return _causal_attention(q, np.repeat(k, g, 1), np.repeat(v, g, 1), 1.0)


def ref_5p(q, k, v, bias):
    return _causal_attention(q, k, v, q.shape[-1] ** -0.5, bias[None])


def ref_6p(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens):
    n, hq, d = queries.shape
    hkv = k_pages.shape[2]
    out = np.zeros_like(queries)
    for i in range(n):
        kk = k_pages[page_indices[i]].reshape(-1, hkv, d)[: kv_lens[i]]
        vv = v_pages[page_indices[i]].reshape(-1, hkv, d)[: kv_lens[i]]
        for h in range(hq):
            p = _softmax(kk[:, h * hkv // hq] @ queries[cu_q_lens[i], h] * d**-0.5)
            out[i, h] = p @ vv[:, h * hkv // hq]
    return out


def ref_7p(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    t_all, hq, d = q.shape
    hkv = kv_pages.shape[2] // 2
    out = np.zeros_like(q)
    for i in range(int(num_seqs[0])):
        lo, hi, kl = cu_q_lens[i], cu_q_lens[i + 1], kv_lens[i]
        kv = kv_pages[page_indices[i]].reshape(-1, 2 * hkv, d)[:kl]
        for h in range(hq):
            g = h // (hq // hkv)
            out[lo:hi, h] = _causal_attention(q[lo:hi, h], kv[:, 2 * g], kv[:, 2 * g + 1], d**-0.5)
    return out


def ref_10p(x, router, gate, up, down):
    logits = x @ router
    top = np.argsort(-logits, axis=-1, kind="stable")[..., :2]
    w = _softmax(np.take_along_axis(logits, top, -1))
    out = np.zeros(x.shape, np.float32)
    for n in range(router.shape[1]):
        g = x @ gate[n]
        y = (g / (1 + np.exp(-g)) * (x @ up[n])) @ down[n]
        out += (w * (top == n)).sum(-1, keepdims=True) * y
    return out


def ref_11p(lhs, rhs, group_sizes):
    bounds = np.concatenate([[0], np.cumsum(group_sizes)])
    return np.concatenate([lhs[bounds[g] : bounds[g + 1]] @ rhs[g] for g in range(len(group_sizes))])


def ref_12p(x, scale):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * scale


def ref_13p(hidden, weight, labels):
    z = hidden @ weight
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    return np.mean(lse - z[np.arange(len(labels)), labels])


def ref_15p(q, k, v):
    h, s = q.shape[1], q.shape[2]
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    gamma = 1 - 2.0 ** (-5 - np.arange(h))
    decay = np.where(i >= j, gamma[:, None, None] ** np.maximum(i - j, 0), 0.0)
    a = np.einsum("bhqd,bhkd->bhqk", q, k) * decay
    return (a / np.maximum(np.abs(a).sum(-1, keepdims=True), 1)) @ v


def ref_16p(q, k, v, a_log):
    a = 1 / (1 + np.exp(-a_log.astype(np.float64))) + 1e-8
    s = q.shape[2]
    lmat = np.zeros(a.shape + (s,))
    for i in range(s):
        lmat[..., i, : i + 1] = _decay_row(a, i)
    sc = np.einsum("bhqd,bhkd->bhqk", q, k) * lmat
    r = sc.sum(-1, keepdims=True)
    r = np.where(np.abs(r) < 1e-6, 1, r)
    return sc / np.maximum(np.abs(r), 1) @ v


def _decay_row(a, i):
    """[..., i+1]: entry j = prod_{m=j+1..i} a_m."""
    tail = a[..., 1 : i + 1]  # a_1 … a_i
    rev = np.cumprod(tail[..., ::-1], axis=-1)[..., ::-1]  # entry j: prod a_{j+1..i}
    return np.concatenate([rev, np.ones(a.shape[:-1] + (1,))], -1)


def ref_17p(pair, mask, lp, rp, lg, rg, cscale, op, og):
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    act = pair * mask
    left = (act @ lp) * sig(act @ lg)
    right = (act @ rp) * sig(act @ rg)
    t = np.einsum("ikc,jkc->ijc", left, right)
    tn = t / np.sqrt((t * t).mean(-1, keepdims=True) + 1e-6) * cscale
    return (tn @ op) * sig(pair @ og)


REFS = {
    "1p": ref_1p, "2p": ref_2p, "3p": ref_3p, "4p": ref_4p, "5p": ref_5p, "6p": ref_6p, "7p": ref_7p,
    "10p": ref_10p, "11p": ref_11p, "12p": ref_12p, "13p": ref_13p, "15p": ref_15p, "16p": ref_16p,
    "17p": ref_17p,
}  # fmt: skip


@pytest.mark.parametrize("short", by_weight(REFS))
def test_math_matches_numpy_f32(short):
    m = load_task(short)
    xs = m.create_inputs(jnp.float32, size="small")
    got = np.asarray(jax.jit(m.workload)(*xs), np.float32)
    want = REFS[short](*_np(xs))
    assert got.shape == np.shape(want)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4 * scale)


@pytest.mark.parametrize("short", ["4p", "5p", "6p"])
def test_tight_tolerance_accepts_f32_rejects_zeros(short):
    m = load_task(short)
    xs = m.create_inputs(size="small")
    ref = np.asarray(jax.jit(m.workload)(*xs).astype(jnp.float32))
    cand = np.asarray(jnp.asarray(REFS[short](*_np(xs))).astype(jnp.bfloat16).astype(jnp.float32))
    atol, rtol = m.CONFIG["atol"], m.CONFIG["rtol"]
    assert np.allclose(ref, cand, atol=atol, rtol=rtol)
    assert not np.allclose(ref, np.zeros_like(cand), atol=atol, rtol=rtol)
