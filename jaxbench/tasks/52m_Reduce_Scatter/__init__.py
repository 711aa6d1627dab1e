"""52m Reduce-scatter over a 4-chip ring: each chip holds a partial sum, and gets one summed slice back.

The gradient / row-parallel-output pattern: every chip computed a full partial [D·c, N]; the result is
their sum, scattered so that chip i keeps rows [i·c, (i+1)·c). Globally the input is the chips'
partials stacked [D·D·c, N] (sharded by rows) and the output is [D·c, N] (sharded by rows).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype

SIZES = {
    # Per chip: a [4·512, 1024] bf16 partial (4 MiB) reduced into a [512, 1024] slice.
    "full": {"devices": 4, "rows": 512, "N": 1024},
    "small": {"devices": 4, "rows": 16, "N": 256},
}

CONFIG = {
    "name": "reduce_scatter_4chip",
    "model": "tensor / data parallel reduction",
    "operator": "reduce_scatter",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}

MESH = {
    "axes": {"x": 4},
    "in_specs": [["x", None]],
    "out_specs": ["x", None],
}

SEED = 52


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """partials [D·D·c, N] ~ N(0,1): chip i's partial is rows [i·D·c, (i+1)·D·c)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    n_dev, rows = d["devices"], d["rows"]
    return (normal(make_key(key, SEED), (n_dev * n_dev * rows, d["N"]), dtype),)


def workload(partials: jax.Array) -> jax.Array:
    """Sum the chips' partials (in f32), rows [i·c, (i+1)·c) of the sum land on chip i."""
    n_dev = MESH["axes"]["x"]
    stacked = partials.reshape(n_dev, partials.shape[0] // n_dev, partials.shape[1])
    return stacked.astype(jnp.float32).sum(axis=0).astype(partials.dtype)


def get_flops(size: str = "full") -> int:
    d = SIZES[size]
    return (d["devices"] - 1) * d["devices"] * d["rows"] * d["N"]
