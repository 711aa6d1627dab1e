"""40k Gemm_GroupNorm_Min_BiasAdd (KernelBench L2 #75): out[0, c, n, 0] = min_j GN(y)[n, j] + bias[c].

The per-row minimum [B, 1] broadcasts against bias [1, out, 1, 1] into an outer sum [1, out, B, 1],
reproducing the KernelBench original's shape behaviour.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192, "num_groups": 512},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256, "num_groups": 16},
}

CONFIG = {
    "name": "75_Gemm_GroupNorm_Min_BiasAdd",
    "model": "KernelBench-L2",
    "operator": "gemm_groupnorm_min_bias_add",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}

_GROUP_SIZE = CONFIG["out_features"] // CONFIG["num_groups"]  # 16 features per group at every size


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x ~ U[0,1) from key(0); weight [out, in], linear_bias [out], bias [1, out, 1, 1] ~ N*0.02
    from key(0xBADC0DE). Returns (x, weight, linear_bias, gn_weight=1, gn_bias=0, bias)."""
    x, weight, linear_bias, (kc,) = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=kseries.BADC0DE, n_params=3, out_in=True
    )
    dt, n = x.dtype, weight.shape[0]
    bias = kseries.normal(kc, (1, n, 1, 1), dt)
    return x, weight, linear_bias, jnp.ones((n,), dt), jnp.zeros((n,), dt), bias


def workload(
    x: jax.Array,
    weight: jax.Array,
    linear_bias: jax.Array,
    gn_weight: jax.Array,
    gn_bias: jax.Array,
    bias: jax.Array,
) -> jax.Array:
    y = jnp.dot(x, weight.T) + linear_bias  # [B, out]
    z = kseries.group_norm_rows(y, y.shape[1] // _GROUP_SIZE, CONFIG["eps"]) * gn_weight + gn_bias
    m = jnp.min(z, axis=1, keepdims=True)  # [B, 1], exact in bf16
    return m + bias  # [B, 1] + [1, out, 1, 1] -> [1, out, B, 1]


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
