"""14p Ragged_Dot: Mixtral-8x7B expert up-projection with uniform, pre-split groups (sheet §5, 14p).

Nothing is ragged despite the name (and the original docstring's phantom group_sizes input): each of the
G groups has M/G rows, already split, so this is a batched matmul.

A package because a Pallas reference kernel lives beside it (``pallas_reference.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"num_groups": 8, "M": 8192, "K": 4096, "N": 14336},
    # N / K = 3.5 as in the full shape.
    "small": {"num_groups": 8, "M": 1024, "K": 256, "N": 896},
}

CONFIG = {
    "name": "mixtral_8x7b_ragged_dot",
    "model": "Mixtral-8x7B",
    "operator": "ragged_dot",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [G, M/G, K] ~ N(0,1); weights [G, K, N] ~ N(0,1)·0.02."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2 = split(make_key(key, SEED), 2)
    g = d["num_groups"]
    x = normal(k1, (g, d["M"] // g, d["K"]), dtype)
    weights = normal(k2, (g, d["K"], d["N"]), dtype, 0.02)
    return x, weights


def workload(x: jax.Array, weights: jax.Array) -> jax.Array:
    """out[g] = x[g] @ weights[g]; output [G, M/G, N] in the dtype."""
    return jnp.einsum("gmk,gkn->gmn", x, weights)


def get_flops(size: str = "full") -> int:
    """2·M·K·N."""
    d = SIZES[size]
    return 2 * d["M"] * d["K"] * d["N"]
