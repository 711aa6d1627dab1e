"""46k Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp (KernelBench L2 #92).

c = bf(conv(x)) + b; r = c + hardswish(tanh(GroupNorm(c))); out = logsumexp over channels. The
residual uses the pre-norm conv output, as in the original.
"""

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
        "groups": 16,
        "height": 128,
        "width": 128,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 8,
        "out_channels": 64,
        "kernel_size": 3,
        "groups": 16,
        "height": 16,
        "width": 16,
    },
}

CONFIG = {
    "name": "92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp",
    "model": "KernelBench-L2",
    "operator": "conv2d_groupnorm_tanh_hardswish_residual_add_logsumexp",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x NCHW ~ U[0,1) from key(0); conv_weight OIHW, conv_bias [O] ~ N*0.02 from split(key(42), 2).
    Returns (x, conv_weight, conv_bias, gn_weight=1, gn_bias=0)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (kx,), (ka, kb) = kseries.task_keys(key, param_seed=42, n_params=2)
    o, i, k = d["out_channels"], d["in_channels"], d["kernel_size"]
    x = kseries.uniform(kx, (d["batch_size"], i, d["height"], d["width"]), dt)
    weight = kseries.normal(ka, (o, i, k, k), dt)
    return x, weight, kseries.normal(kb, (o,), dt), jnp.ones((o,), dt), jnp.zeros((o,), dt)


def workload(
    x: jax.Array, weight: jax.Array, conv_bias: jax.Array, gn_weight: jax.Array, gn_bias: jax.Array
) -> jax.Array:
    c = kseries.conv(x, weight) + kseries.channel(conv_bias, x.ndim)  # [N, C, H', W']
    n, ch, h, w = c.shape
    g = CONFIG["groups"]
    gn = kseries.normalize(c.reshape(n, g, ch // g, h, w), axes=(2, 3, 4), eps=CONFIG["eps"])
    gn = gn.reshape(c.shape) * kseries.channel(gn_weight, 4) + kseries.channel(gn_bias, 4)
    t = jnp.tanh(gn)
    hs = t * jnp.minimum(jnp.maximum(t + 3, 0), 6) / 6
    return jax.nn.logsumexp(c + hs, axis=1, keepdims=True)  # [N, 1, H', W'] (R5)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    k = d["kernel_size"]
    out = (d["height"] - k + 1, d["width"] - k + 1)
    return kseries.conv_flops(d["batch_size"], d["in_channels"], d["out_channels"], out, k)
