"""Spot-check the k-task math (18k-50k) against independent float32 NumPy formulations.

Each task runs at ``size="small"`` on float32 inputs, so the comparison checks the math (axes,
layouts, operator order) rather than bf16 rounding. The softmax tasks also check that their
tightened tolerances reject an all-zeros output but accept an all-f32 candidate.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.jaxbench import registry

F32_TOL = {"rtol": 2e-4, "atol": 2e-4}


def _run(task_id: str, dtype=jnp.float32):
    task = registry.load_task(task_id)
    inputs = task.create_inputs(dtype, size="small")
    out = jax.jit(task.workload)(*inputs)
    return [np.asarray(a, np.float32) for a in inputs], np.asarray(out, np.float32)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _logsumexp(x, axis, keepdims=False):
    m = x.max(axis=axis, keepdims=True)
    out = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _conv2d(x, w):
    """VALID cross-correlation NCHW x OIHW, as a sum of shifted channel contractions."""
    _, _, kh, kw = w.shape
    ho, wo = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], ho, wo), np.float64)
    for p in range(kh):
        for q in range(kw):
            out += np.einsum("nihw,oi->nohw", x[:, :, p : p + ho, q : q + wo], w[:, :, p, q])
    return out.astype(np.float32)


def _conv_transpose3d(x, w, stride=2, padding=1):
    """y[n,o,z] = sum_{i,q,t: z = stride*q - padding + t} x[n,i,q] w[i,o,t], per spatial dim (scatter form)."""
    n, _, d, h, wd = x.shape
    k = w.shape[-1]
    full = np.zeros((n, w.shape[1], stride * d + k, stride * h + k, stride * wd + k), np.float64)
    for a in range(k):
        for b in range(k):
            for c in range(k):
                contrib = np.einsum("nidhw,io->nodhw", x, w[:, :, a, b, c])
                full[
                    :,
                    :,
                    a : a + stride * d : stride,
                    b : b + stride * h : stride,
                    c : c + stride * wd : stride,
                ] += contrib
    s = slice(padding, None)
    return full[:, :, s, s, s][:, :, : stride * d, : stride * h, : stride * wd].astype(np.float32)


def _norm(y, axes, eps=1e-5):
    mu = y.mean(axis=axes, keepdims=True)
    return (y - mu) / np.sqrt(y.var(axis=axes, keepdims=True) + eps)


@pytest.mark.slow  # an XLA:CPU convolution at small: tens of seconds
def test_18k_conv_relu_bias():
    (x, w, cb, b), out = _run("18k")
    ref = np.maximum(_conv2d(x, w) + cb[None, :, None, None], 0) + b[None]
    np.testing.assert_allclose(out, ref, **F32_TOL)


@pytest.mark.slow  # an XLA:CPU convolution at small: tens of seconds
def test_22k_conv_instancenorm_divide():
    (x, w, cb, iw, ib), out = _run("22k")
    y = _conv2d(x, w) + cb[None, :, None, None]
    ref = (_norm(y, (2, 3)) * iw[None, :, None, None] + ib[None, :, None, None]) / 2
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.slow  # an XLA:CPU convolution at small: tens of seconds
def test_28k_conv_transpose3d_layernorm_over_w_gelu():
    (x, w, cb, lw, lb), out = _run("28k")
    y = _conv_transpose3d(x, w) + cb[None, :, None, None, None]
    ref = _gelu_tanh(_norm(y, -1) * lw + lb)
    assert out.shape == (8, 16, 16, 16, 16)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.slow  # an XLA:CPU convolution at small: tens of seconds
def test_46k_conv_groupnorm_hardswish_residual_logsumexp():
    (x, w, cb, gw, gb), out = _run("46k")
    c = _conv2d(x, w) + cb[None, :, None, None]
    n, ch, h, wd = c.shape
    g = _norm(c.reshape(n, 16, ch // 16, h, wd), (2, 3, 4)).reshape(c.shape)
    t = np.tanh(g * gw[None, :, None, None] + gb[None, :, None, None])
    hs = t * np.clip(t + 3, 0, 6) / 6
    np.testing.assert_allclose(out, _logsumexp(c + hs, 1, keepdims=True), **F32_TOL)


def test_21k_gemm_divide_sum_scaling():
    (x, w), out = _run("21k")
    ref = (x.astype(np.float64) @ w.T / 2).sum(axis=1, keepdims=True) * 1.5
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-2)


def test_24k_logsumexp_times_mish():
    (x, w, b), out = _run("24k")
    c = np.clip(4 * (x @ w.T + b), -10, 10)
    lse = _logsumexp(c, 1, keepdims=True)
    ref = lse * lse * np.tanh(np.log1p(np.exp(lse)))
    np.testing.assert_allclose(out, ref, **F32_TOL)


def test_26k_output_ignores_the_dead_matmul():
    (x, y, w, bb, iw, ib), out = _run("26k")
    np.testing.assert_allclose(out, (ib + y) * y, **F32_TOL)


def test_40k_groupnorm_min_outer_bias_broadcast():
    (x, w, lb, gw, gb, bias), out = _run("40k")
    y = x @ w.T + lb
    z = _norm(y.reshape(y.shape[0], -1, 16), 2).reshape(y.shape) * gw + gb
    ref = z.min(axis=1)[None, None, :, None] + bias  # [1, out, B, 1]
    assert out.shape == (1, w.shape[0], x.shape[0], 1)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


def test_49k_feature_avgpool_gelu_scale_max():
    (x, w, b), out = _run("49k")
    y = x @ w + b
    p = y.reshape(y.shape[0], -1, 16).mean(axis=2)
    np.testing.assert_allclose(out, (2 * _gelu_tanh(p)).max(axis=1), **F32_TOL)


def test_32k_two_gemms_logsumexp():
    (x, w1, b1, w2, b2), out = _run("32k")
    h = 1 / (1 + np.exp(-(x @ w1.T + b1)))
    np.testing.assert_allclose(out, _logsumexp(h @ w2.T + b2, 1), **F32_TOL)


SOFTMAX_TASKS = {
    "38k": lambda x, w, b: _softmax(x @ w.T + b, 1),
    "43k": lambda x, w, b, s, bb, m, v, sc: _softmax(sc * (s * (x @ w + b - m) / np.sqrt(v + 1e-5) + bb), 1),
    "50k": lambda x, w, b: _softmax(_gelu_tanh(x @ w + b), 1),
}


@pytest.mark.parametrize("task_id", sorted(SOFTMAX_TASKS))
def test_softmax_task_math(task_id):
    inputs, out = _run(task_id)
    np.testing.assert_allclose(out, SOFTMAX_TASKS[task_id](*inputs), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("task_id", sorted(SOFTMAX_TASKS))
def test_weak_check_tolerance_rejects_zeros_and_accepts_f32(task_id):
    task = registry.load_task(task_id)
    atol, rtol = task.CONFIG["atol"], task.CONFIG["rtol"]
    inputs = task.create_inputs(size="small")  # bf16, as the harness runs it
    ref = np.asarray(jax.jit(task.workload)(*inputs), np.float32)
    assert not np.allclose(ref, np.zeros_like(ref), atol=atol, rtol=rtol)
    assert not np.allclose(ref, np.full_like(ref, 1.0 / ref.shape[1]), atol=atol, rtol=rtol)
    f32 = jax.jit(task.workload)(*[a.astype(jnp.float32) for a in inputs])
    cand = np.asarray(f32.astype(jnp.bfloat16), np.float32)
    assert np.allclose(ref, cand, atol=atol, rtol=rtol)
