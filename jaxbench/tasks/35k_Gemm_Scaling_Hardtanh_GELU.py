"""35k Gemm_Scaling_Hardtanh_GELU (KernelBench L2 #53): tanh-GELU(clip((bf(x @ W) + b) * 0.5, -2, 2)).

The GELU is written out as in the original, every step in bf16 with bf16-rounded constants (R2).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256},
}

CONFIG = {
    "name": "53_Gemm_Scaling_Hardtanh_GELU",
    "model": "KernelBench-L2",
    "operator": "gemm_scaling_hardtanh_gelu",
    **SIZES["full"],
    "scaling_factor": 0.5,
    "hardtanh_min": -2,
    "hardtanh_max": 2,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}

_C1 = math.sqrt(2.0 / math.pi)  # weak scalar: bf16 0.796875
_C2 = 0.044715  # weak scalar: bf16 0.044677734375


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=kseries.BADC0DE)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = (jnp.dot(x, weight) + bias) * CONFIG["scaling_factor"]  # [B, out]
    h = jnp.clip(y, CONFIG["hardtanh_min"], CONFIG["hardtanh_max"])
    return (h * 0.5) * (1 + jnp.tanh(_C1 * (h + _C2 * h**3)))


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
