"""25k Conv3d_GroupNorm_Mean (KernelBench L2 #23): per-sample mean of GroupNorm(bf(conv3d(x)) + b).

Mathematically every output is ~mean(beta) (each normalised group has mean ~0); only rounding noise
makes samples differ.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {
        "batch_size": 128,
        "in_channels": 3,
        "out_channels": 24,
        "kernel_size": 3,
        "num_groups": 8,
        "depth": 24,
        "height": 32,
        "width": 32,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 3,
        "out_channels": 24,
        "kernel_size": 3,
        "num_groups": 8,
        "depth": 8,
        "height": 16,
        "width": 16,
    },
}

CONFIG = {
    "name": "23_Conv3d_GroupNorm_Mean",
    "model": "KernelBench-L2",
    "operator": "conv3d_groupnorm_mean",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x NCDHW ~ U[0,1) from key(0); from split(key(42), 3): weight OIDHW, conv_bias [O], beta [O]
    ~ N*0.02. Returns (x, weight, conv_bias, gamma=1, beta)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (kx,), (ka, kb, kc) = kseries.task_keys(key, param_seed=42, n_params=3)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(kx, (d["batch_size"], i, d["depth"], d["height"], d["width"]), dt)
    weight = kseries.normal(ka, (o, i, k, k, k), dt)
    return x, weight, kseries.normal(kb, (o,), dt), jnp.ones((o,), dt), kseries.normal(kc, (o,), dt)


def workload(
    x: jax.Array, weight: jax.Array, conv_bias: jax.Array, gamma: jax.Array, beta: jax.Array
) -> jax.Array:
    y = kseries.conv(x, weight) + kseries.channel(conv_bias, x.ndim)  # [N, C, D', H', W']
    n, c = y.shape[:2]
    g = CONFIG["num_groups"]
    grouped = y.reshape((n, g, c // g) + y.shape[2:])  # consecutive channels per group
    z = kseries.normalize(grouped, axes=(2, 3, 4, 5), eps=CONFIG["eps"]).reshape(y.shape)
    z = z * kseries.channel(gamma, z.ndim) + kseries.channel(beta, z.ndim)
    return jnp.mean(z, axis=(1, 2, 3, 4))  # [N], f32 mean rounded to bf16 (R3)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = tuple(d[s] - k + 1 for s in ("depth", "height", "width"))
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
