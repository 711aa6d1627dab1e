"""31k Gemm_BatchNorm_GELU_ReLU (KernelBench L2 #41): relu(gelu_tanh(train-mode BN over the batch)).

BatchNorm statistics come from the current batch (axis 0), with the variance written as
mean(bf((y - bf(mu))²)); no running statistics are used or updated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {"batch_size": 16384, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 128, "in_features": 8192, "out_features": 256},
}

CONFIG = {
    "name": "41_Gemm_BatchNorm_GELU_ReLU",
    "model": "KernelBench-L2",
    "operator": "gemm_batchnorm_gelu_relu",
    **SIZES["full"],
    "eps": 1e-5,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """k1, k2, k3 = split(key(0), 3): x ~ U[0,1); weight [out, in], bias [out] ~ unscaled N(0,1).
    Returns (x, weight, bias, bn_weight=1, bn_bias=0)."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (k1, k2, k3), _ = kseries.task_keys(key, n_data=3)
    n = d["out_features"]
    x = kseries.uniform(k1, (d["batch_size"], d["in_features"]), dt)
    weight = kseries.normal(k2, (n, d["in_features"]), dt, scale=None)
    bias = kseries.normal(k3, (n,), dt, scale=None)
    return x, weight, bias, jnp.ones((n,), dt), jnp.zeros((n,), dt)


def workload(
    x: jax.Array, weight: jax.Array, bias: jax.Array, bn_weight: jax.Array, bn_bias: jax.Array
) -> jax.Array:
    y = jnp.dot(x, weight.T) + bias  # [B, out]
    z = kseries.normalize_sq(y, axes=0, eps=CONFIG["eps"]) * bn_weight + bn_bias
    return jax.nn.relu(kseries.gelu_tanh(z))


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
