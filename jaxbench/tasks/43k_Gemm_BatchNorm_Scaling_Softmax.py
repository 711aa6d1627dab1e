"""43k Gemm_BatchNorm_Scaling_Softmax (KernelBench L2 #84): softmax_j(scale * eval-BN(bf(x @ W) + b)).

With the given running statistics (mean 0, var 1) bf(sqrt(1 + 1e-5)) = 1, so the result is
softmax(y + bn_bias) up to bf16 rounding; the original's unused bn_momentum is not carried.
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
    "name": "84_Gemm_BatchNorm_Scaling_Softmax",
    "model": "KernelBench-L2",
    "operator": "gemm_batchnorm_scaling_softmax",
    **SIZES["full"],
    "bn_eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    # Softmax outputs are ~1/out_features (1.2e-4 at full size): under the harness's atol = 1e-2 an
    # all-zeros output passes. These fail zeros and a uniform output (see kseries.SOFTMAX_ATOL).
    "atol": kseries.SOFTMAX_ATOL,
    "rtol": kseries.SOFTMAX_RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x ~ U[0,1) from key(0); weight [in, out], bias, bn_bias [out] ~ N*0.02 from key(42).

    Returns (x, weight, bias, bn_scale=1, bn_bias, bn_mean=0, bn_var=1, scale=[1]).
    """
    x, weight, bias, (kc,) = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=42, n_params=3)
    dt, n = x.dtype, weight.shape[1]
    bn_bias = kseries.normal(kc, (n,), dt)
    ones, zeros = jnp.ones((n,), dt), jnp.zeros((n,), dt)
    return x, weight, bias, ones, bn_bias, zeros, ones, jnp.ones((1,), dt)


def workload(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array,
    bn_scale: jax.Array,
    bn_bias: jax.Array,
    bn_mean: jax.Array,
    bn_var: jax.Array,
    scale: jax.Array,
) -> jax.Array:
    y = jnp.dot(x, weight) + bias  # [B, out]
    n = (y - bn_mean) / jnp.sqrt(bn_var + CONFIG["bn_eps"])  # eval-mode BatchNorm
    z = scale * (bn_scale * n + bn_bias)
    return jax.nn.softmax(z, axis=1)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
