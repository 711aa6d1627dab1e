"""34k Conv2d_Activation_BatchNorm (KernelBench L2 #52): train-mode BatchNorm2d(mish(bf(conv(x)) + b)).

BatchNorm statistics over (N, H, W) per channel from the current batch, variance written as
mean(bf((a - bf(mu))²)); no running statistics. Weights and bias are unscaled N(0,1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {
        "batch_size": 64,
        "in_channels": 64,
        "out_channels": 128,
        "kernel_size": 3,
        "height": 128,
        "width": 128,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 8,
        "out_channels": 128,
        "kernel_size": 3,
        "height": 16,
        "width": 16,
    },
}

CONFIG = {
    "name": "52_Conv2d_Activation_BatchNorm",
    "model": "KernelBench-L2",
    "operator": "conv2d_mish_batchnorm",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """k1, k2, k3 = split(key(0), 3): x NCHW ~ U[0,1); conv_weight OIHW, conv_bias [O] ~ unscaled
    N(0,1). Returns (x, conv_weight, conv_bias, bn_weight=1, bn_bias=0)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (k1, k2, k3), _ = kseries.task_keys(key, n_data=3)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(k1, (d["batch_size"], i, d["height"], d["width"]), dt)
    weight = kseries.normal(k2, (o, i, k, k), dt, scale=None)
    bias = kseries.normal(k3, (o,), dt, scale=None)
    return x, weight, bias, jnp.ones((o,), dt), jnp.zeros((o,), dt)


def workload(
    x: jax.Array, weight: jax.Array, conv_bias: jax.Array, bn_weight: jax.Array, bn_bias: jax.Array
) -> jax.Array:
    y = kseries.conv(x, weight) + kseries.channel(conv_bias, x.ndim)  # [N, O, H-2, W-2]
    a = jnp.tanh(jax.nn.softplus(y)) * y
    z = kseries.normalize_sq(a, axes=(0, 2, 3), eps=CONFIG["eps"])
    return z * kseries.channel(bn_weight, z.ndim) + kseries.channel(bn_bias, z.ndim)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = (d["height"] - k + 1, d["width"] - k + 1)
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
