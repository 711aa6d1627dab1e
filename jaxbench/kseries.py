"""Shared inputs and math for the KernelBench Level-2 ("k", 18k-50k) JaxBench tasks.

Twenty-odd k tasks feed the same ``x ~ U[0,1); W, b ~ N(0,1)*0.02`` pattern from two seeds, and a
dozen normalise or reduce by the same bf16 rules (sheet §3, R3-R5); one copy here keeps them identical.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common

DTYPE = jnp.bfloat16  # every k task runs in bf16 under the harness (the originals default to f32)
X_SEED = 0  # activations come from key(0), directly or through a split
BADC0DE = 0xBADC0DE  # = 195936478, the usual parameter seed; some tasks use 42
WEIGHT_SCALE = 0.02
ATOL = 1e-2  # the harness's np.allclose tolerances
RTOL = 1e-2
# The softmax tasks (38k, 43k, 50k) output ~1/out_features (1.2e-4 at full size), far below ATOL,
# so the harness check passes all zeros. atol = 1e-5 (~8% of 1/8192) makes zeros and a uniform
# 1/N output fail. rtol = 3e-2 because the bf16 graph itself is ~2-5% off exact math: bf16 (y - max)
# of magnitude 4-8 has a 0.03 ulp, i.e. up to 1.6% error in exp before the bf16 sum and divide.
# Measured: an all-f32 candidate differs by up to 5.7% on the tiniest entries, and passes
# (1e-5, 3e-2) at 256 and 8192 features, but not (1e-5, 2e-2).
SOFTMAX_ATOL = 1e-5
SOFTMAX_RTOL = 3e-2


def dims(sizes: Mapping[str, Mapping[str, int]], size: str) -> dict[str, int]:
    """The dimension dict for ``size``, with one precise error for an unknown name."""
    if size not in sizes:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(sizes)}")
    return dict(sizes[size])


def task_keys(
    key: common.KeyLike, *, n_data: int | None = None, param_seed: int | None = None, n_params: int = 0
) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """(data keys, parameter keys) following the sheet's two seed patterns.

    ``n_data=None`` draws x directly from the data key; an int splits it (``split(key(0), n)``).
    ``param_seed=None`` means the task has no separate parameter key. With ``key=None`` the sheet's
    seeds are used; a caller's key (or int seed) is folded into two independent streams instead.
    """
    if key is None:
        data_root = jax.random.key(X_SEED)
        param_root = jax.random.key(param_seed) if param_seed is not None else None
    else:
        root = common.make_key(key, X_SEED)
        data_root, param_root = jax.random.fold_in(root, 0), jax.random.fold_in(root, 1)
    data = (data_root,) if n_data is None else common.split(data_root, n_data)
    params = common.split(param_root, n_params) if (param_seed is not None and n_params) else ()
    return data, params


def uniform(key: jax.Array, shape: tuple[int, ...], dtype) -> jax.Array:
    """U[0,1) sampled directly in ``dtype`` (the activations of every k task)."""
    return jax.random.uniform(key, shape, dtype)


def normal(key: jax.Array, shape: tuple[int, ...], dtype, scale: float | None = WEIGHT_SCALE) -> jax.Array:
    """N(0,1)*scale in ``dtype``; ``scale=None`` for the sheet's "unscaled" weights."""
    return common.normal(key, shape, dtype, scale)


def linear_inputs(
    sizes: Mapping[str, Mapping[str, int]],
    size: str,
    dtype,
    key: common.KeyLike,
    *,
    param_seed: int,
    n_params: int = 2,
    out_in: bool = False,
    m: str = "batch_size",
    k: str = "in_features",
    n: str = "out_features",
) -> tuple[jax.Array, jax.Array, jax.Array, tuple[jax.Array, ...]]:
    """The common (x, weight, bias) triple plus the unused parameter keys, for extra parameters.

    x [M, K] ~ U[0,1) directly from the data key; weight ~ N*0.02 from parameter key 0, laid out
    [K, N] (``x @ W``) or, with ``out_in``, [N, K] (``x @ Wᵀ``); bias [N] ~ N*0.02 from key 1.
    """
    d = dims(sizes, size)
    dt = common.resolve_dtype(dtype, DTYPE)
    (kx,), pk = task_keys(key, param_seed=param_seed, n_params=n_params)
    x = uniform(kx, (d[m], d[k]), dt)
    w = normal(pk[0], (d[n], d[k]) if out_in else (d[k], d[n]), dt)
    b = normal(pk[1], (d[n],), dt)
    return x, w, b, pk[2:]


# ---- math shared by several tasks (sheet §3 rules; inputs may be any float dtype) ----


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU with the tanh approximation (jax.nn.gelu's default); constants round to x's dtype (R2)."""
    return jax.nn.gelu(x, approximate=True)


def mish(x: jax.Array) -> jax.Array:
    """x * tanh(softplus(x)) with the stable softplus (logaddexp(x, 0))."""
    return x * jnp.tanh(jax.nn.softplus(x))


def normalize(y: jax.Array, axes, eps: float = 1e-5) -> jax.Array:
    """(y - bf(mean)) / sqrt(bf(var) + eps), biased variance computed from the f32 mean (R4)."""
    mu = jnp.mean(y, axis=axes, keepdims=True)
    var = jnp.var(y, axis=axes, keepdims=True)
    return (y - mu) / jnp.sqrt(var + eps)


def normalize_sq(y: jax.Array, axes, eps: float = 1e-5) -> jax.Array:
    """Like ``normalize`` but variance = mean((y - bf(mean))²) with the square in y's dtype (R4 variant)."""
    mu = jnp.mean(y, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(y - mu), axis=axes, keepdims=True)
    return (y - mu) / jnp.sqrt(var + eps)


def group_norm_rows(y: jax.Array, num_groups: int, eps: float = 1e-5) -> jax.Array:
    """GroupNorm of a [M, N] matrix: per row, ``num_groups`` groups of consecutive features (R4)."""
    m, n = y.shape
    g = y.reshape(m, num_groups, n // num_groups)
    return normalize(g, axes=2, eps=eps).reshape(m, n)


def conv(x: jax.Array, w: jax.Array) -> jax.Array:
    """PyTorch-style VALID, stride-1 cross-correlation, NC(D)HW x OI(D)HW, result in x's dtype (R1)."""
    nd = x.ndim - 2
    spatial = "DHW"[-nd:]
    dn = jax.lax.conv_dimension_numbers(x.shape, w.shape, (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}"))
    return jax.lax.conv_general_dilated(x, w, (1,) * nd, "VALID", dimension_numbers=dn)


def channel(v: jax.Array, ndim: int) -> jax.Array:
    """A per-channel vector [C] shaped to broadcast against an NC... tensor of rank ``ndim``."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


# ---- nominal FLOP counts (dominant terms; the harness would use XLA's cost analysis instead) ----


def matmul_flops(m: int, k: int, n: int) -> int:
    return 2 * m * k * n


def conv_flops(batch: int, c_in: int, c_out: int, out_spatial: tuple[int, ...], kernel: int) -> int:
    """2 * N * O * prod(out spatial) * I * kernel^ndim (multiply-adds of a VALID conv)."""
    out = 1
    for s in out_spatial:
        out *= s
    return 2 * batch * c_out * out * c_in * kernel ** len(out_spatial)
