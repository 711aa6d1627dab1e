"""Elementwise: the input viewed as [rows, 128 * lanes_mult] and tiled by row blocks."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import Template, divides

SOURCE = '''"""Elementwise ${operator} over a lane-dense 2-D view (offline template `elementwise`)."""

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}
LANES = ${lanes}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _kernel(x_ref, o_ref):
    x = x_ref[...]  # [block_rows, LANES]
    o_ref[...] = (${expr}).astype(o_ref.dtype)


def workload(x):
    total = math.prod(x.shape)
    if total % LANES:
        raise ValueError(f"{total} elements should be divisible by LANES={LANES}")
    rows = total // LANES
    br = min(BLOCK_ROWS, rows)
    if rows % br:
        raise ValueError(f"rows={rows} should be divisible by block_rows={br}")

    # x / out are (rows, LANES): row block i
    def row_map(i):
        return i, 0

    out = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((rows, LANES), x.dtype),
        grid=(rows // br,),
        in_specs=[pl.BlockSpec((br, LANES), row_map)],
        out_specs=pl.BlockSpec((br, LANES), row_map),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel",), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_elementwise",
    )(x.reshape(rows, LANES))
    return out.reshape(x.shape)
'''

# One-input elementwise operators (none of the 50 tasks is purely elementwise; these serve ad-hoc use).
EXPRS = {
    "relu": "jnp.maximum(x, 0)",
    "gelu": "jax.nn.gelu(x.astype(jnp.float32))",
    "silu": "jax.nn.silu(x.astype(jnp.float32))",
}


def _dims(sizes: Mapping[str, Any]) -> dict[str, int]:
    return {"N": math.prod(int(v) for v in sizes.values() if isinstance(v, int))}


def _problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
    if not d:
        return []
    if d["N"] % c["lanes"]:
        return [f"lanes: N={d['N']} is not divisible by {c['lanes']}"]
    why = divides(int(c["block_rows"]), d["N"] // c["lanes"], 8)
    return [f"block_rows: rows={why}"] if why else []


def _vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
    return 2 * 2 * 4 * min(c["block_rows"], d["N"] // c["lanes"]) * c["lanes"]


def _cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
    rows = d["N"] // c["lanes"]
    return 2 * 2 * d["N"] / 1.6e12 * 1e6 + 0.35 * rows / min(c["block_rows"], rows)


ELEMENTWISE = Template(
    name="elementwise",
    operators=tuple(EXPRS),
    source=SOURCE,
    tunables={"block_rows": (8, 64, 256, 1024), "lanes": (128, 512, 1024)},
    dims_of=_dims,
    problems=_problems,
    vmem_bytes=_vmem,
    cost_us=_cost,
    initial={"block_rows": 8, "lanes": 128},
    fixed=lambda op: {"expr": EXPRS[op]},
    constraints=("N % lanes == 0", "rows % min(block_rows, rows) == 0, block_rows % 8 == 0 unless all rows"),
    grid_axes=lambda c: ["rows"],
    semantics=lambda c: ["parallel"],
)
