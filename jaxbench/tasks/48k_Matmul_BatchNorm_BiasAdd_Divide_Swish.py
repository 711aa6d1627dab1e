"""48k Matmul_BatchNorm_BiasAdd_Divide_Swish (KernelBench L2 #97): swish(eval-BN(y) + bias) / 1.

With the given running statistics (mean 0, var 1) bf(sqrt(1 + 1e-5)) = 1, so the BatchNorm is an
exact identity up to its bias; the original's unused bn_momentum is not carried.
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
    "name": "97_Matmul_BatchNorm_BiasAdd_Divide_Swish",
    "model": "KernelBench-L2",
    "operator": "matmul_batchnorm_bias_add_divide_swish",
    **SIZES["full"],
    "bn_eps": 1e-5,
    "divide_value": 1.0,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x ~ U[0,1) from key(0); weight [in, out], linear_bias [out], bias [1] ~ N*0.02 from key(0xBADC0DE).

    Returns (x, weight, linear_bias, bn_scale=1, bn_bias=0, bn_mean=0, bn_var=1, bias).
    """
    x, weight, linear_bias, (kc,) = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=kseries.BADC0DE, n_params=3
    )
    dt, n = x.dtype, weight.shape[1]
    bias = kseries.normal(kc, (1,), dt)
    ones, zeros = jnp.ones((n,), dt), jnp.zeros((n,), dt)
    return x, weight, linear_bias, ones, zeros, zeros, ones, bias


def workload(
    x: jax.Array,
    weight: jax.Array,
    linear_bias: jax.Array,
    bn_scale: jax.Array,
    bn_bias: jax.Array,
    bn_mean: jax.Array,
    bn_var: jax.Array,
    bias: jax.Array,
) -> jax.Array:
    y = jnp.dot(x, weight) + linear_bias  # [B, out]
    n = (y - bn_mean) / jnp.sqrt(bn_var + CONFIG["bn_eps"])  # eval-mode BatchNorm
    z = (bn_scale * n + bn_bias + bias) / CONFIG["divide_value"]
    return z * jax.nn.sigmoid(z)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
