"""44k Matmul_Divide_GELU (KernelBench L2 #86): tanh-GELU((bf(x @ W) + b) / 10), bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "input_size": 8192, "output_size": 8192},
    "small": {"batch_size": 128, "input_size": 8192, "output_size": 256},
}

CONFIG = {
    "name": "86_Matmul_Divide_GELU",
    "model": "KernelBench-L2",
    "operator": "matmul_divide_gelu",
    **SIZES["full"],
    "divisor": 10.0,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=kseries.BADC0DE, k="input_size", n="output_size"
    )
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = (jnp.dot(x, weight) + bias) / CONFIG["divisor"]  # [B, out]
    return kseries.gelu_tanh(y)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["input_size"], d["output_size"])
