"""42k Gemm_Max_Subtract_GELU (KernelBench L2 #80): gelu(y - rowmax(y)), y = bf(x @ W) + b; out in [-0.17, 0]."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256},
}

CONFIG = {
    "name": "80_Gemm_Max_Subtract_GELU",
    "model": "KernelBench-L2",
    "operator": "gemm_max_subtract_gelu",
    **SIZES["full"],
    "max_dim": 1,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """k_x, k_w, k_b = split(key(0), 3): x ~ U[0,1); weight [in, out], bias [out] ~ N*0.02."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (k_x, k_w, k_b), _ = kseries.task_keys(key, n_data=3)
    x = kseries.uniform(k_x, (d["batch_size"], d["in_features"]), dt)
    weight = kseries.normal(k_w, (d["in_features"], d["out_features"]), dt)
    bias = kseries.normal(k_b, (d["out_features"],), dt)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight) + bias  # [B, out]
    d = y - jnp.max(y, axis=CONFIG["max_dim"], keepdims=True)  # max is exact in bf16
    return kseries.gelu_tanh(d)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
