"""29k Matmul_Swish_Sum_GroupNorm (KernelBench L2 #37): GN(swish(bf(x @ W)) + bias), groups of 64.

The bias is added after the swish, as in the original; GroupNorm per row over 64 consecutive
features with the R4 rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 8192, "in_features": 4096, "out_features": 4096, "num_groups": 64},
    "small": {"batch_size": 128, "in_features": 4096, "out_features": 256, "num_groups": 4},
}

CONFIG = {
    "name": "37_Matmul_Swish_Sum_GroupNorm",
    "model": "KernelBench-L2",
    "operator": "matmul_swish_sum_groupnorm",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}

_GROUP_SIZE = CONFIG["out_features"] // CONFIG["num_groups"]  # 64 features per group at every size


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(0xBADC0DE).
    Returns (x, weight, bias, gn_weight=1, gn_bias=0)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=kseries.BADC0DE)
    dt, n = x.dtype, weight.shape[1]
    return x, weight, bias, jnp.ones((n,), dt), jnp.zeros((n,), dt)


def workload(
    x: jax.Array, weight: jax.Array, bias: jax.Array, gn_weight: jax.Array, gn_bias: jax.Array
) -> jax.Array:
    y = jnp.dot(x, weight)  # [B, out]
    t = jax.nn.sigmoid(y) * y + bias
    return kseries.group_norm_rows(t, t.shape[1] // _GROUP_SIZE, CONFIG["eps"]) * gn_weight + gn_bias


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
