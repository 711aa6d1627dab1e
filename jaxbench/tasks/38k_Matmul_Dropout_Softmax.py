"""38k Matmul_Dropout_Softmax (KernelBench L2 #66): softmax_j(bf(x @ Wᵀ) + b), bf16 (R5).

Dropout runs in inference mode, i.e. it is the identity: the output is deterministic and needs no
dropout key. (The original keeps dropout_p = 0.2 in CONFIG without using it; we record p = 0.2 with
``dropout_applied: False`` so nobody assumes a mask.)
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
    "name": "66_Matmul_Dropout_Softmax",
    "model": "KernelBench-L2",
    "operator": "matmul_softmax",
    **SIZES["full"],
    "dropout_p": 0.2,
    "dropout_applied": False,
    "dtype": "bfloat16",  # the harness always runs k tasks in bf16 (the original defaults to f32)
    # Softmax outputs are ~1/out_features (1.2e-4 at full size): under the harness's atol = 1e-2 an
    # all-zeros output passes. These fail zeros and a uniform output (see kseries.SOFTMAX_ATOL).
    "atol": kseries.SOFTMAX_ATOL,
    "rtol": kseries.SOFTMAX_RTOL,
}


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, in] ~ U[0,1) from key(0); weight [out, in], bias [out] ~ N*0.02 from key(42)."""
    x, weight, bias, _ = kseries.linear_inputs(SIZES, size, dtype, key, param_seed=42, out_in=True)
    return x, weight, bias


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    y = jnp.dot(x, weight.T) + bias  # [B, out]; dropout (inference mode) is the identity
    return jax.nn.softmax(y, axis=1)


def get_flops(size: str = "full") -> int:
    d = kseries.dims(SIZES, size)
    return kseries.matmul_flops(d["batch_size"], d["in_features"], d["out_features"])
