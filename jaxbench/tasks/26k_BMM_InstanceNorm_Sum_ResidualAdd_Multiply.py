"""26k BMM_InstanceNorm_Sum_ResidualAdd_Multiply (KernelBench L2 #28): (in_bias + y) * y.

InstanceNorm over a 1x1 "spatial" extent maps every value to exactly 0, so the matmul is dead: the
output does not depend on x, bmm_weight or bmm_bias (barring inf/NaN). The reference still computes
it, as the original does, and get_flops counts it; a candidate may skip it and match exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256},
}

CONFIG = {
    "name": "28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply",
    "model": "KernelBench-L2",
    "operator": "bmm_instancenorm_sum_residual_add_multiply",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """k1, k2 = split(key(0), 2): x [B, in], y [B, out] ~ U[0,1); from key(42) (split 3):
    bmm_weight [out, in], bmm_bias, in_bias [out] ~ N*0.02.
    Returns (x, y, bmm_weight, bmm_bias, in_weight=1, in_bias)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (k1, k2), (ka, kb, kc) = kseries.task_keys(key, n_data=2, param_seed=42, n_params=3)
    b, i, o = d["batch_size"], d["in_features"], d["out_features"]
    x, y = kseries.uniform(k1, (b, i), dt), kseries.uniform(k2, (b, o), dt)
    weight, bmm_bias, in_bias = (
        kseries.normal(ka, (o, i), dt),
        kseries.normal(kb, (o,), dt),
        kseries.normal(kc, (o,), dt),
    )
    return x, y, weight, bmm_bias, jnp.ones((o,), dt), in_bias


def workload(
    x: jax.Array,
    y: jax.Array,
    weight: jax.Array,
    bmm_bias: jax.Array,
    in_weight: jax.Array,
    in_bias: jax.Array,
) -> jax.Array:
    t = jnp.dot(x, weight.T) + bmm_bias  # [B, out]
    t4 = t.reshape(t.shape + (1, 1))  # [N, C, 1, 1]: InstanceNorm over a 1x1 extent
    z = kseries.normalize(t4, axes=(2, 3), eps=CONFIG["eps"]).reshape(t.shape)  # exactly 0
    z = z * in_weight + in_bias
    return (z + y) * y


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
