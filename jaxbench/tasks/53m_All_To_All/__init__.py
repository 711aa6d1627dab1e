"""53m All-to-all over 4 chips: the expert-parallel token exchange of a mixture-of-experts layer.

Chip i holds D blocks [D, c, N], block j destined for chip j; afterwards chip j holds block j of every
chip, in source order. Globally: input [D·D·c, N] sharded by rows, output the (source, destination)
transpose of its blocks, also sharded by rows.
"""

from __future__ import annotations

import jax

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype

SIZES = {
    # Per chip: 4 blocks of 1024 tokens x 1024 features, bf16 (8 MiB in, 8 MiB out).
    "full": {"devices": 4, "tokens": 1024, "N": 1024},
    "small": {"devices": 4, "tokens": 8, "N": 128},
}

CONFIG = {
    "name": "moe_all_to_all_4chip",
    "model": "Mixtral-style expert parallelism",
    "operator": "all_to_all",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 0.0,
    "rtol": 0.0,
}

MESH = {
    "axes": {"x": 4},
    "in_specs": [["x", None]],
    "out_specs": ["x", None],
}

SEED = 53


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """tokens [D·D·c, N] ~ N(0,1): rows [(i·D + j)·c, (i·D + j + 1)·c) go from chip i to chip j."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    n_dev = d["devices"]
    return (normal(make_key(key, SEED), (n_dev * n_dev * d["tokens"], d["N"]), dtype),)


def workload(tokens: jax.Array) -> jax.Array:
    """Swap the (source chip, destination chip) block axes: a pure data movement, exact."""
    n_dev = MESH["axes"]["x"]
    c, n = tokens.shape[0] // (n_dev * n_dev), tokens.shape[1]
    return tokens.reshape(n_dev, n_dev, c, n).transpose(1, 0, 2, 3).reshape(n_dev * n_dev * c, n)


def get_flops(size: str = "full") -> int:
    return 0
