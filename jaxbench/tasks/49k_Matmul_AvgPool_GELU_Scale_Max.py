"""49k Matmul_AvgPool_GELU_Scale_Max (KernelBench L2 #98): row max of 2 * gelu(avgpool16(y)).

The average pool runs along the feature axis (window = stride = 16, VALID); as in the traced graph,
the window sum is a bf16 reduce-window (no f32 upcast) and the division by 16 is bf16.
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
    "name": "98_Matmul_AvgPool_GELU_Scale_Max",
    "model": "KernelBench-L2",
    "operator": "matmul_avgpool_gelu_scale_max",
    **SIZES["full"],
    "pool_kernel_size": 16,
    "scale_factor": 2.0,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=kseries.BADC0DE)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    k = CONFIG["pool_kernel_size"]
    y = jnp.dot(x, weight) + bias  # [B, out]
    window_sum = jax.lax.reduce_window(y, jnp.zeros((), y.dtype), jax.lax.add, (1, k), (1, k), "VALID")
    p = window_sum / k  # [B, out // k]
    g = kseries.gelu_tanh(p)
    return jnp.max(g * CONFIG["scale_factor"], axis=1)  # [B]


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
