"""36k Matmul_Sigmoid_Sum (KernelBench L2 #56): row sums of sigmoid(bf(x @ W) + b); values ≈ hidden/2."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "input_size": 8192, "hidden_size": 8192},
    "small": {"batch_size": 128, "input_size": 8192, "hidden_size": 256},
}

CONFIG = {
    "name": "56_Matmul_Sigmoid_Sum",
    "model": "KernelBench-L2",
    "operator": "matmul_sigmoid_sum",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, hidden], bias [hidden] ~ N*0.02 from key(42)."""
    x, weight, bias, _ = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=42, k="input_size", n="hidden_size"
    )
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    s = jax.nn.sigmoid(jnp.dot(x, weight) + bias)  # [B, hidden], bf16
    return jnp.sum(s, axis=1, keepdims=True)  # [B, 1], f32 sum rounded to bf16 (R3)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["input_size"], d["hidden_size"])
