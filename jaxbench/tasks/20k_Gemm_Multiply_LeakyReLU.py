"""20k Gemm_Multiply_LeakyReLU (KernelBench L2 #12): leaky_relu((bf(x @ W) + b) * 2, slope 0.1), bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256},
}

CONFIG = {
    "name": "12_Gemm_Multiply_LeakyReLU",
    "model": "KernelBench-L2",
    "operator": "gemm_multiply_leaky_relu",
    **SIZES["full"],
    "multiplier": 2.0,
    "negative_slope": 0.1,  # a weak scalar: bf16 0.10009765625 (R2)
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=kseries.BADC0DE)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    v = (jnp.dot(x, weight) + bias) * CONFIG["multiplier"]  # [B, out]
    return jnp.where(v >= 0, v, v * CONFIG["negative_slope"])


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
