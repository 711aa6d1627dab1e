"""33k Conv3d_Mish_Tanh (KernelBench L2 #47): tanh(y * tanh(log(1 + exp(y)))), y = bf(conv3d(x)) + b.

Softplus is written naively here (not the stable form), in bf16, as in the original.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {
        "batch_size": 16,
        "in_channels": 32,
        "out_channels": 64,
        "kernel_size": 3,
        "depth": 32,
        "height": 64,
        "width": 64,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 8,
        "out_channels": 16,
        "kernel_size": 3,
        "depth": 8,
        "height": 16,
        "width": 16,
    },
}

CONFIG = {
    "name": "47_Conv3d_Mish_Tanh",
    "model": "KernelBench-L2",
    "operator": "conv3d_mish_tanh",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x NCDHW ~ U[0,1) from key(0); weight OIDHW, bias [O] ~ N*0.02 from split(key(0xBADC0DE), 2)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (kx,), (ka, kb) = kseries.task_keys(key, param_seed=kseries.BADC0DE, n_params=2)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(kx, (d["batch_size"], i, d["depth"], d["height"], d["width"]), dt)
    return x, kseries.normal(ka, (o, i, k, k, k), dt), kseries.normal(kb, (o,), dt)


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = kseries.conv(x, weight) + kseries.channel(bias, x.ndim)  # [N, O, D', H', W']
    m = y * jnp.tanh(jnp.log(1 + jnp.exp(y)))
    return jnp.tanh(m)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = tuple(d[s] - k + 1 for s in ("depth", "height", "width"))
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
