"""45k Gemm_GroupNorm_Swish_Multiply_Swish (KernelBench L2 #88): swish(swish(GN(y)) * multiply_weight).

y = bf(x @ Wᵀ) + gemm_bias; GroupNorm per row, groups of 32 consecutive features (R4); all bf16.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192, "num_groups": 256},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256, "num_groups": 8},
}

CONFIG = {
    "name": "88_Gemm_GroupNorm_Swish_Multiply_Swish",
    "model": "KernelBench-L2",
    "operator": "gemm_groupnorm_swish_multiply_swish",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}

_GROUP_SIZE = CONFIG["out_features"] // CONFIG["num_groups"]  # 32 features per group at every size


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x ~ U[0,1) from key(0); from key(42): gemm_weight [out, in], gemm_bias [out] ~ N*0.02 and
    multiply_weight [out] ~ unscaled N(0,1). Returns (x, W, gemm_bias, gn_weight=1, gn_bias=0, mw)."""
    x, weight, gemm_bias, (kc,) = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=42, n_params=3, out_in=True
    )
    dt, n = x.dtype, weight.shape[0]
    multiply_weight = kseries.normal(kc, (n,), dt, scale=None)
    return x, weight, gemm_bias, jnp.ones((n,), dt), jnp.zeros((n,), dt), multiply_weight


def workload(
    x: jax.Array,
    weight: jax.Array,
    gemm_bias: jax.Array,
    gn_weight: jax.Array,
    gn_bias: jax.Array,
    multiply_weight: jax.Array,
) -> jax.Array:
    y = jnp.dot(x, weight.T) + gemm_bias  # [B, out]
    z = kseries.group_norm_rows(y, y.shape[1] // _GROUP_SIZE, CONFIG["eps"]) * gn_weight + gn_bias
    s = z * jax.nn.sigmoid(z)
    t = s * multiply_weight
    return t * jax.nn.sigmoid(t)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
