"""8p GEMM: the Llama-3.1-70B MLP up-projection shape as a dense bf16 matmul (sheet §5, 8p)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"M": 8192, "K": 8192, "N": 28672},
    # N/K = 3.5 as in the full shape; every dimension a multiple of 128.
    "small": {"M": 256, "K": 256, "N": 896},
}

CONFIG = {
    "name": "gemm_llama70b",
    "model": "Llama-3.1-70B",
    "operator": "dense_matmul",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """A [M, K] ~ N(0,1) and B [K, N] ~ N(0,1)·0.02."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2 = split(make_key(key, SEED), 2)
    return normal(k1, (d["M"], d["K"]), dtype), normal(k2, (d["K"], d["N"]), dtype, 0.02)


def workload(a: jax.Array, b: jax.Array) -> jax.Array:
    """C = A @ B, accumulated in f32 on TPU, returned in the input dtype."""
    return jnp.matmul(a, b)


def get_flops(size: str = "full") -> int:
    """2·M·K·N."""
    d = SIZES[size]
    return 2 * d["M"] * d["K"] * d["N"]
