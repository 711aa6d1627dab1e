"""39k Conv2d_GELU_GlobalAvgPool (KernelBench L2 #67): spatial mean of gelu_tanh(bf(conv(x)) + b)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {
        "batch_size": 128,
        "in_channels": 8,
        "out_channels": 64,
        "kernel_size": 3,
        "height": 256,
        "width": 256,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 8,
        "out_channels": 64,
        "kernel_size": 3,
        "height": 16,
        "width": 16,
    },
}

CONFIG = {
    "name": "67_Conv2d_GELU_GlobalAvgPool",
    "model": "KernelBench-L2",
    "operator": "conv2d_gelu_global_avg_pool",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x NCHW ~ U[0,1) from key(0); weight OIHW, bias [O] ~ N*0.02 from split(key(0xBADC0DE), 2)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (kx,), (ka, kb) = kseries.task_keys(key, param_seed=kseries.BADC0DE, n_params=2)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(kx, (d["batch_size"], i, d["height"], d["width"]), dt)
    return x, kseries.normal(ka, (o, i, k, k), dt), kseries.normal(kb, (o,), dt)


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = kseries.conv(x, weight) + kseries.channel(bias, x.ndim)  # [N, O, H-2, W-2]
    return jnp.mean(kseries.gelu_tanh(y), axis=(2, 3))  # [N, O], f32 mean rounded to bf16 (R3)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = (d["height"] - k + 1, d["width"] - k + 1)
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
