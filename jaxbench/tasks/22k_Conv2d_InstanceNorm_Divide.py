"""22k Conv2d_InstanceNorm_Divide (KernelBench L2 #17): InstanceNorm(bf(conv(x)) + b) / 2, bf16.

InstanceNorm per (n, c) over the spatial positions, biased variance, eps = 1e-5 (R4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {
        "batch_size": 128,
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
    "name": "17_Conv2d_InstanceNorm_Divide",
    "model": "KernelBench-L2",
    "operator": "conv2d_instancenorm_divide",
    **SIZES["full"],
    "divide_by": 2.0,
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x NCHW ~ U[0,1) from key(0); weight OIHW, conv_bias [O] ~ N*0.02 from key(0xBADC0DE).
    Returns (x, weight, conv_bias, in_weight=1, in_bias=0)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (kx,), (ka, kb) = kseries.task_keys(key, param_seed=kseries.BADC0DE, n_params=2)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(kx, (d["batch_size"], i, d["height"], d["width"]), dt)
    weight = kseries.normal(ka, (o, i, k, k), dt)
    return x, weight, kseries.normal(kb, (o,), dt), jnp.ones((o,), dt), jnp.zeros((o,), dt)


def workload(
    x: jax.Array, weight: jax.Array, conv_bias: jax.Array, in_weight: jax.Array, in_bias: jax.Array
) -> jax.Array:
    y = kseries.conv(x, weight) + kseries.channel(conv_bias, x.ndim)  # [N, O, H-2, W-2]
    z = kseries.normalize(y, axes=(2, 3), eps=CONFIG["eps"])
    z = z * kseries.channel(in_weight, z.ndim) + kseries.channel(in_bias, z.ndim)
    return z / CONFIG["divide_by"]


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = (d["height"] - k + 1, d["width"] - k + 1)
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
