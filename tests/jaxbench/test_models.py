"""The model references (jaxbench/models): the reference format, seeding, production shapes, and the math
of each layer against an independent float32 NumPy formulation at small size."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.jaxbench.registry import list_model_ids, list_task_ids, load_model, resolve_model

MODELS = ["llama3_8b_layer", "mixtral_8x7b_moe_layer", "vit_l16_block"]


def test_models_are_listed_apart_from_the_50_tasks():
    assert list_model_ids() == sorted(MODELS)
    assert len(list_task_ids()) == 50
    assert resolve_model("llama3") == "llama3_8b_layer"


@pytest.mark.parametrize("name", MODELS)
def test_format_and_full_shapes(name):
    m = load_model(name)
    assert set(m.SIZES) == {"full", "small"}
    full = jax.eval_shape(lambda: m.create_inputs(size="full"))
    out = jax.eval_shape(m.workload, *full)
    d = m.SIZES["full"]
    assert out.shape == (d["batch"], d["seq_len"], d["emb_dim"]) and out.dtype == jnp.bfloat16
    assert d["batch"] * d["seq_len"] >= 8192  # production token counts
    assert m.get_flops("full") > 1e11 and m.get_flops("small") < m.get_flops("full")


@pytest.mark.parametrize("name", MODELS)
def test_small_is_seeded(name):
    m = load_model(name)
    a = m.create_inputs(size="small", key=jax.random.key(1))
    b = m.create_inputs(size="small", key=jax.random.key(1))
    c = m.create_inputs(size="small", key=jax.random.key(2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def _f32(xs):
    return [np.asarray(x, np.float32) for x in xs]


def _rms(x, s, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * s


def _softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def _silu(x):
    return x / (1 + np.exp(-x))


def test_llama_layer_math():
    m = load_model("llama3_8b_layer")
    ins = m.create_inputs(size="small")
    x, an, wq, wk, wv, wo, mn, wg, wu, wd = _f32(ins)
    d = m.SIZES["small"]
    s, h, kv, hd = d["seq_len"], d["num_heads"], d["num_kv_heads"], d["head_dim"]
    a = _rms(x[0], an)
    q, k, v = (a @ wq).reshape(s, h, hd), (a @ wk).reshape(s, kv, hd), (a @ wv).reshape(s, kv, hd)
    inv = 1.0 / 500000.0 ** (np.arange(0, hd, 2) / hd)
    ang = np.arange(s)[:, None] * inv[None]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

    def rope(t):
        t1, t2 = t[..., : hd // 2], t[..., hd // 2 :]
        return np.concatenate([t1 * cos - t2 * sin, t2 * cos + t1 * sin], -1)

    q, k = rope(q), rope(k)
    k, v = np.repeat(k, h // kv, axis=1), np.repeat(v, h // kv, axis=1)
    sc = np.einsum("shd,thd->hst", q, k) / np.sqrt(hd)
    sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    o = np.einsum("hst,thd->shd", _softmax(sc), v).reshape(s, h * hd)
    hid = x[0] + o @ wo
    b = _rms(hid, mn)
    want = hid + (_silu(b @ wg) * (b @ wu)) @ wd
    got = np.asarray(jax.jit(m.workload)(*ins), np.float32)[0]
    np.testing.assert_allclose(got, want, atol=0.1, rtol=0.05)  # bf16 activations through ~10 roundings


def test_moe_layer_math():
    m = load_model("mixtral_8x7b_moe_layer")
    ins = m.create_inputs(size="small")
    x, router, wg, wu, wd = _f32(ins)
    t = x[0]
    logits = t @ router
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :2]
    w = _softmax(np.take_along_axis(logits, top, -1))
    want = np.zeros_like(t)
    for i in range(t.shape[0]):
        for j in range(2):
            e = top[i, j]
            want[i] += w[i, j] * ((_silu(t[i] @ wg[e]) * (t[i] @ wu[e])) @ wd[e])
    got = np.asarray(jax.jit(m.workload)(*ins), np.float32)[0]
    np.testing.assert_allclose(got, want, atol=0.05, rtol=0.05)


def test_vit_block_math():
    from scipy.special import erf

    m = load_model("vit_l16_block")
    ins = m.create_inputs(size="small")
    x, l1s, l1b, wqkv, bqkv, wo, bo, l2s, l2b, w1, b1, w2, b2 = _f32(ins)

    def ln(v, s, b):
        mu = v.mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(((v - mu) ** 2).mean(-1, keepdims=True) + 1e-6) * s + b

    bsz, s, e = x.shape
    h = e // 64
    qkv = (ln(x, l1s, l1b) @ wqkv + bqkv).reshape(bsz, s, 3, h, 64)
    sc = np.einsum("bshd,bthd->bhst", qkv[:, :, 0], qkv[:, :, 1]) / 8.0
    o = np.einsum("bhst,bthd->bshd", _softmax(sc), qkv[:, :, 2]).reshape(bsz, s, e)
    hid = x + o @ wo + bo
    y = ln(hid, l2s, l2b) @ w1 + b1
    want = hid + (0.5 * y * (1 + erf(y / np.sqrt(2)))) @ w2 + b2
    got = np.asarray(jax.jit(m.workload)(*ins), np.float32)
    np.testing.assert_allclose(got, want, atol=0.1, rtol=0.05)


def test_reference_loader_takes_a_model_id():
    from maxkernel.tpu_tools.problem.reference import load_reference

    ref = load_reference("llama3_8b_layer")
    assert ref.info.sizes == ["full", "small"] and ref.info.name == "llama3_8b_layer"
