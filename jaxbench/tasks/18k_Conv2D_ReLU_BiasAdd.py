"""18k Conv2D_ReLU_BiasAdd (KernelBench L2 #1): relu(bf(conv(x, w)) + conv_bias) + bias, all bf16.

The conv bias is added before the ReLU and the second bias after it.
"""

from __future__ import annotations

import jax

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
    "name": "1_Conv2D_ReLU_BiasAdd",
    "model": "KernelBench-L2",
    "operator": "conv2d_relu_bias_add",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x NCHW ~ U[0,1) from split(key(0), 2)[0]; from split(key(0xBADC0DE), 3): weight OIHW,
    conv_bias [O], bias [O, 1, 1], all N*0.02. (The sheet's second data subkey is unused.)"""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (k1, _), (ka, kb, kc) = kseries.task_keys(key, n_data=2, param_seed=kseries.BADC0DE, n_params=3)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(k1, (d["batch_size"], i, d["height"], d["width"]), dt)
    weight = kseries.normal(ka, (o, i, k, k), dt)
    return x, weight, kseries.normal(kb, (o,), dt), kseries.normal(kc, (o, 1, 1), dt)


def workload(x: jax.Array, weight: jax.Array, conv_bias: jax.Array, bias: jax.Array) -> jax.Array:
    y = kseries.conv(x, weight) + kseries.channel(conv_bias, x.ndim)  # [N, O, H-2, W-2]
    return jax.nn.relu(y) + bias


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = (d["height"] - k + 1, d["width"] - k + 1)
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
