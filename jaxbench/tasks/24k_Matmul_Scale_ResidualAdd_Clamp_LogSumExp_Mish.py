"""24k Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish (KernelBench L2 #22): l * mish(l), l = row LSE.

l = logsumexp_j clip(4 * (bf(x @ Wᵀ) + b), -10, 10); the original multiplies by mish a second time,
so the result is l * mish(l), not mish(l).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "input_size": 8192, "hidden_size": 8192},
    "small": {"batch_size": 128, "input_size": 8192, "hidden_size": 256},
}

CONFIG = {
    "name": "22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish",
    "model": "KernelBench-L2",
    "operator": "matmul_scale_residual_clamp_logsumexp_mish",
    **SIZES["full"],
    "scale_factor": 2.0,
    "clamp_min": -10.0,
    "clamp_max": 10.0,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [hidden, in], bias [hidden] ~ N*0.02 from key(42)."""
    x, weight, bias, _ = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=42, out_in=True, k="input_size", n="hidden_size"
    )
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight.T) + bias  # [B, hidden]
    y = y * CONFIG["scale_factor"]
    y = y + y  # residual add of itself: 4y overall, exact in bf16
    c = jnp.clip(y, CONFIG["clamp_min"], CONFIG["clamp_max"])
    lse = jax.nn.logsumexp(c, axis=1, keepdims=True)  # [B, 1] (R5)
    return lse * kseries.mish(lse)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["input_size"], d["hidden_size"])
