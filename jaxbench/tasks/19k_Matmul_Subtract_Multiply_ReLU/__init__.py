"""19k Matmul_Subtract_Multiply_ReLU (KernelBench L2 #9): relu((bf(x @ W) + b - 2) * 1.5), all bf16.

A package because a Pallas reference kernel lives beside it (``pallas_reference.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256},
}

CONFIG = {
    "name": "9_Matmul_Subtract_Multiply_ReLU",
    "model": "KernelBench-L2",
    "operator": "matmul_subtract_multiply_relu",
    **SIZES["full"],
    "subtract_value": 2.0,
    "multiply_value": 1.5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=kseries.BADC0DE)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight) + bias  # [B, out], one rounding after the f32-accumulated dot (R1)
    return jax.nn.relu((y - CONFIG["subtract_value"]) * CONFIG["multiply_value"])


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
