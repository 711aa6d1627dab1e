"""23k Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp (KernelBench L2 #18): row sums of bf(x @ Wᵀ) + b.

The max, mean and two logsumexps act on a singleton axis and are exact identities; they are kept so
the graph reads like the original. As in 21k, mirror the per-element bf16 rounding of the matmul.
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
    "name": "18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp",
    "model": "KernelBench-L2",
    "operator": "matmul_sum_max_avgpool_logsumexp_logsumexp",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [out, in], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=kseries.BADC0DE, out_in=True
    )
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight.T) + bias  # [B, out]
    r = jnp.sum(y, axis=1, keepdims=True)  # [B, 1], f32 sum rounded to bf16 (R3)
    r = jnp.max(r, axis=1, keepdims=True)  # identity on a singleton axis
    r = jnp.mean(r, axis=1, keepdims=True)  # identity
    r = jax.nn.logsumexp(r, axis=1, keepdims=True)  # log(exp(v - v)) + v = v
    return jax.nn.logsumexp(r, axis=1, keepdims=True)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
