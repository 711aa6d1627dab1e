"""Row-wise normalisation: leading axes flattened to rows, each grid step reduces a [block_rows, D] slab."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import MiB, Template, divides

SOURCE = '''"""Row-blocked ${operator} over the last axis (offline template `rowwise`).

Each grid step loads a [block_rows, D] slab, reduces it in f32 and writes it back, so HBM is read
and written once; the op is bandwidth-bound and the block only trades step overhead for VMEM.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}
DIMENSION_SEMANTICS = "${semantics}"
BUFFERS = ${buffers}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
EPSILON = ${epsilon}


def _kernel(x_ref, scale_ref, o_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)  # [block_rows, D]
    ${row_body}


def _spec(shape, index_map):
    if BUFFERS == 2:
        return pl.BlockSpec(shape, index_map)
    return pl.BlockSpec(shape, index_map, pipeline_mode=pl.Buffered(BUFFERS))


def workload(x, scale):
    d = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    br = min(BLOCK_ROWS, rows)
    if rows % br:
        raise ValueError(f"rows={rows} should be divisible by block_rows={br}")

    # x is (rows, d): the [br, D] slab of row-block i
    def x_map(i):
        return i, 0

    # scale is (1, d): the same row every step, fetched once
    def scale_map(i):
        return 0, 0

    cost = pl.CostEstimate(
        flops=5 * rows * d, transcendentals=rows, bytes_accessed=2 * rows * d * x.dtype.itemsize + d * 2
    )
    out = pl.pallas_call(
        functools.partial(_kernel, eps=EPSILON),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        grid=(rows // br,),
        in_specs=[_spec((br, d), x_map), pl.BlockSpec((1, d), scale_map)],
        out_specs=pl.BlockSpec((br, d), x_map),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=(DIMENSION_SEMANTICS,), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_rowwise",
    )(x.reshape(rows, d), scale.reshape(1, d))
    return out.reshape(x.shape)
'''

# Per operator, the body after `x` (f32 slab) is loaded; it must store o_ref. RMSNorm follows the task:
# normalise in f32, round to the input dtype, then a multiply by the bf16 scale.
BODIES = {
    "rms_norm": (
        "ms = jnp.mean(x * x, axis=-1, keepdims=True)  # [block_rows, 1]\n"
        "    normed = (x * jax.lax.rsqrt(ms + eps)).astype(scale_ref.dtype)  # [block_rows, D]\n"
        "    o_ref[...] = (normed * scale_ref[...]).astype(o_ref.dtype)"
    ),
}

ROWS = (8, 16, 32, 64, 128, 256, 512, 1024)


def _dims(sizes: Mapping[str, Any]) -> dict[str, int]:
    rows = int(sizes.get("batch", 1)) * int(sizes.get("seq_len", 1))
    return {"R": rows, "D": int(sizes.get("emb_dim", sizes.get("hidden", 0)))}


def _problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
    if not d:
        return []
    why = divides(int(c["block_rows"]), d["R"], 8)
    return [f"block_rows: R={why}"] if why else []


def _vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
    br = min(int(c["block_rows"]), d["R"])
    return (
        int(c["buffers"]) * br * d["D"] * 2 + 2 * br * d["D"] * 2 + 3 * br * d["D"] * 4
    )  # + f32 temporaries


def _cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
    br = min(int(c["block_rows"]), d["R"])
    steps = d["R"] // br
    penalty = 1e6 if _vmem(c, d) > 48 * MiB else 0.0
    return 4 * d["R"] * d["D"] / 1.6e12 * 1e6 + 0.35 * steps + penalty


ROWWISE = Template(
    name="rowwise",
    operators=tuple(BODIES),
    source=SOURCE,
    tunables={"block_rows": ROWS, "semantics": ("parallel", "arbitrary"), "buffers": (2, 1)},
    dims_of=_dims,
    problems=_problems,
    vmem_bytes=_vmem,
    cost_us=_cost,
    initial={"block_rows": 8, "semantics": "parallel", "buffers": 2},
    fixed=lambda op: {"row_body": BODIES[op], "epsilon": "1e-5"},
    constraints=("R % min(block_rows, R) == 0 and block_rows % 8 == 0 unless it is all rows",),
    grid_axes=lambda c: ["rows"],
    semantics=lambda c: [c["semantics"]],
)
