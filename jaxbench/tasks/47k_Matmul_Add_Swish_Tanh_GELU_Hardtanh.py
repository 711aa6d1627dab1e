"""47k Matmul_Add_Swish_Tanh_GELU_Hardtanh (KernelBench L2 #95): clip(gelu(tanh(swish(y))), -1, 1).

y = bf(x @ W) + bias + add_value (two bf16 adds, in that order); every step in bf16.
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
    "name": "95_Matmul_Add_Swish_Tanh_GELU_Hardtanh",
    "model": "KernelBench-L2",
    "operator": "matmul_add_swish_tanh_gelu_hardtanh",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    "atol": kseries.ATOL,
    "rtol": kseries.RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x ~ U[0,1) from key(0); weight [in, out], bias, add_value [out] ~ N*0.02 from key(0xBADC0DE)."""
    x, weight, bias, (kc,) = kseries.linear_inputs(
        SIZES, size, dtype, key, param_seed=kseries.BADC0DE, n_params=3
    )
    add_value = kseries.normal(kc, bias.shape, bias.dtype)
    return x, weight, bias, add_value


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array, add_value: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight) + bias + add_value  # [B, out]
    s = y * jax.nn.sigmoid(y)
    g = kseries.gelu_tanh(jnp.tanh(s))
    return jnp.clip(g, -1, 1)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
