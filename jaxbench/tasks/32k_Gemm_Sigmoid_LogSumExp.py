"""32k Gemm_Sigmoid_LogSumExp (KernelBench L2 #45): logsumexp_j(bf(sigmoid(x @ w1ᵀ + b1) @ w2ᵀ) + b2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench import common, kseries

SIZES = {
    "full": {"batch_size": 16384, "input_size": 2048, "hidden_size": 4096, "output_size": 1024},
    "small": {"batch_size": 128, "input_size": 2048, "hidden_size": 512, "output_size": 256},
}

CONFIG = {
    "name": "45_Gemm_Sigmoid_LogSumExp",
    "model": "KernelBench-L2",
    "operator": "gemm_sigmoid_gemm_logsumexp",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); ka..kd = split(key(42), 4): w1 [hidden, in], b1 [hidden],
    w2 [out, hidden], b2 [out], all N*0.02."""
    d = kseries.dims(SIZES, size)
    dt = common.resolve_dtype(dtype, kseries.DTYPE)
    (kx,), (ka, kb, kc, kd) = kseries.task_keys(key, param_seed=42, n_params=4)
    b, i, h, o = d["batch_size"], d["input_size"], d["hidden_size"], d["output_size"]
    x = kseries.uniform(kx, (b, i), dt)
    w1, b1 = kseries.normal(ka, (h, i), dt), kseries.normal(kb, (h,), dt)
    w2, b2 = kseries.normal(kc, (o, h), dt), kseries.normal(kd, (o,), dt)
    return x, w1, b1, w2, b2


def workload(x: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array, b2: jax.Array) -> jax.Array:
    h = jax.nn.sigmoid(jnp.dot(x, w1.T) + b1)  # [B, hidden]
    z = jnp.dot(h, w2.T) + b2  # [B, out]
    return jax.nn.logsumexp(z, axis=1)  # [B] (R5)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    b, i, h, o = d["batch_size"], d["input_size"], d["hidden_size"], d["output_size"]
    return kseries.matmul_flops(b, i, h) + kseries.matmul_flops(b, h, o)
