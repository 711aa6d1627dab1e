"""50k Matmul_GELU_Softmax (KernelBench L2 #99): softmax_j(gelu_tanh(bf(x @ W) + b)), bf16 (R5).

A package because a Pallas reference kernel lives beside it (``pallas_reference.py``).
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
    "name": "99_Matmul_GELU_Softmax",
    "model": "KernelBench-L2",
    "operator": "matmul_gelu_softmax",
    **SIZES["full"],
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    # Softmax outputs are ~1/out_features (1.2e-4 at full size): under the harness's atol = 1e-2 an
    # all-zeros output passes. These fail zeros and a uniform output (see kseries.SOFTMAX_ATOL).
    "atol": kseries.SOFTMAX_ATOL,
    "rtol": kseries.SOFTMAX_RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [in, out], bias [out] ~ N*0.02 from key(42)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=42)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    g = kseries.gelu_tanh(jnp.dot(x, weight) + bias)  # [B, out]
    return jax.nn.softmax(g, axis=1)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
