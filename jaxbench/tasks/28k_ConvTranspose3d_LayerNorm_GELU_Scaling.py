"""28k ConvTranspose3d_LayerNorm_GELU_Scaling (KernelBench L2 #34): gelu(LayerNorm_W(convT3d(x))) * 1.

The LayerNorm runs over the last axis of the NCDHW tensor (W, size 64), not over channels: the
original applies LayerNorm(out_channels) to an NCDHW tensor, which works only because
out_channels == W_out. The transposed conv (stride 2, padding 1, kernel 4) is a stride-1
cross-correlation of the 2x-dilated input, padded by k - 1 - p = 2, with the spatially flipped,
in/out-swapped kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {
        "batch_size": 32,
        "in_channels": 32,
        "out_channels": 64,
        "kernel_size": 4,
        "stride": 2,
        "padding": 1,
        "depth": 16,
        "height": 32,
        "width": 32,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 8,
        "out_channels": 16,
        "kernel_size": 4,
        "stride": 2,
        "padding": 1,
        "depth": 8,
        "height": 8,
        "width": 8,
    },
}

CONFIG = {
    "name": "34_ConvTranspose3d_LayerNorm_GELU_Scaling",
    "model": "KernelBench-L2",
    "operator": "conv_transpose3d_layernorm_gelu_scaling",
    **SIZES["full"],
    "bias": True,
    "eps": 1e-5,
    "scaling_factor": 1.0,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """k1, k2 = split(key(0), 2): x NCDHW ~ U[0,1); conv_weight [I, O, k, k, k] (PyTorch
    ConvTranspose layout) ~ unscaled N(0,1). Returns (x, conv_weight, conv_bias=0, ln_weight=1,
    ln_bias=0); the LayerNorm vectors have W_out = 2 * width entries."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (k1, k2), _ = kseries.task_keys(key, n_data=2)
    i, o, k = d["in_channels"], d["out_channels"], d["kernel_size"]
    x = kseries.uniform(k1, (d["batch_size"], i, d["depth"], d["height"], d["width"]), dt)
    weight = kseries.normal(k2, (i, o, k, k, k), dt, scale=None)
    w_out = d["stride"] * d["width"]
    return x, weight, jnp.zeros((o,), dt), jnp.ones((w_out,), dt), jnp.zeros((w_out,), dt)


def conv_transpose3d(x: jax.Array, weight: jax.Array) -> jax.Array:
    """PyTorch ConvTranspose3d (stride 2, padding 1) of NCDHW x with an [I, O, k, k, k] weight.

    The input is scattered into zeros at stride-2 positions explicitly (XLA:CPU's lhs_dilation
    path is ~100x slower than a plain conv), padded by k - 1 - p, then cross-correlated.
    """
    k, s, p = weight.shape[-1], CONFIG["stride"], CONFIG["padding"]
    n, c, d, h, w = x.shape
    dilated = jnp.zeros((n, c, s * (d - 1) + 1, s * (h - 1) + 1, s * (w - 1) + 1), x.dtype)
    dilated = dilated.at[:, :, ::s, ::s, ::s].set(x)
    edge = k - 1 - p
    padded = jnp.pad(dilated, [(0, 0), (0, 0)] + [(edge, edge)] * 3)
    flipped = jnp.flip(weight, axis=(2, 3, 4)).transpose(1, 0, 2, 3, 4)  # [O, I, k, k, k]
    return kseries.conv(padded, flipped)


def workload(
    x: jax.Array, weight: jax.Array, conv_bias: jax.Array, ln_weight: jax.Array, ln_bias: jax.Array
) -> jax.Array:
    y = conv_transpose3d(x, weight) + kseries.channel(conv_bias, x.ndim)  # [N, O, 2D, 2H, 2W]
    z = kseries.normalize_sq(y, axes=-1, eps=CONFIG["eps"]) * ln_weight + ln_bias  # over W
    return kseries.gelu_tanh(z) * CONFIG["scaling_factor"]


def get_flops(size: str = "full") -> int:
    """Useful multiply-adds only: each output sees in_channels * (k / stride)^3 = 8 * I inputs (the
    dilated formulation does 8x that, mostly multiplying zeros)."""
    d = kseries.dims(SIZES, size)
    s = d["stride"]
    out_voxels = s**3 * d["depth"] * d["height"] * d["width"]
    taps = (d["kernel_size"] // s) ** 3
    return 2 * d["batch_size"] * d["out_channels"] * out_voxels * d["in_channels"] * taps
