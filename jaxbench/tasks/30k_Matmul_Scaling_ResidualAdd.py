"""30k Matmul_Scaling_ResidualAdd (KernelBench L2 #40): y * 0.5 + y with y = bf(x @ W) + b, bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 16384, "in_features": 4096, "out_features": 4096},
    "small": {"batch_size": 128, "in_features": 4096, "out_features": 256},
}

CONFIG = {
    "name": "40_Matmul_Scaling_ResidualAdd",
    "model": "KernelBench-L2",
    "operator": "matmul_scaling_residual_add",
    **SIZES["full"],
    "scaling_factor": 0.5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=kseries.BADC0DE)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight) + bias  # [B, out]
    return y * CONFIG["scaling_factor"] + y  # 1.5 * y up to one bf16 rounding


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
