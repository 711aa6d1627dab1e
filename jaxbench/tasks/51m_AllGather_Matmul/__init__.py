"""51m All-gather matmul (collective matmul) over a 4-chip ring: y = x @ w with x sharded by rows.

The tensor-parallel MLP up-projection of a Llama-3-8B-class layer, per 4 chips: activations x [M, K]
arrive sharded over the token axis, the weight w [K, N] is sharded over its output axis, and the
result y [M, N] is sharded over N. XLA's baseline all-gathers x, then multiplies; a collective-matmul
kernel overlaps each chunk's transfer with the previous chunk's matmul.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    # A per-layer shard that stays VMEM-resident on one chip (x 1 MiB, w 2 MiB, y 4 MiB per chip, bf16).
    "full": {"devices": 4, "M": 2048, "K": 1024, "N": 4096},
    "small": {"devices": 4, "M": 64, "K": 128, "N": 512},
}

CONFIG = {
    "name": "allgather_matmul_4chip",
    "model": "Llama-3-8B (tensor parallel)",
    "operator": "allgather_matmul",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}

# The device mesh: one ring axis; x sharded by rows, w and y by columns.
MESH = {
    "axes": {"x": 4},
    "in_specs": [["x", None], [None, "x"]],
    "out_specs": [None, "x"],
}

SEED = 51


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [M, K] ~ N(0,1); w [K, N] ~ N(0,1)·K^-1/2 (global arrays; the harness shards them by MESH)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2 = split(make_key(key, SEED), 2)
    x = normal(k1, (d["M"], d["K"]), dtype)
    w = normal(k2, (d["K"], d["N"]), dtype, d["K"] ** -0.5)
    return x, w


def workload(x: jax.Array, w: jax.Array) -> jax.Array:
    """y = x @ w, accumulated in f32, returned in the input dtype."""
    return jnp.matmul(x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def get_flops(size: str = "full") -> int:
    d = SIZES[size]
    return 2 * d["M"] * d["K"] * d["N"]
