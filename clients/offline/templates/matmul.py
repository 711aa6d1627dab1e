"""Tiled matmul with a fused epilogue: bf16 operands, an f32 VMEM accumulator, epilogue on the last k-step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import MiB, Template, divides

SOURCE = '''"""Tiled [M, K] @ [K, N] matmul with a fused epilogue (offline template `matmul`, ${operator}).

Grid (outer, outer, k) with k innermost and "arbitrary": the accumulator is zeroed on the first
k-step and the epilogue runs once, on the last, so each output tile is written to HBM once. Blocks
larger than a dim are clamped to it, so one module serves every task size.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_M = ${block_m}
BLOCK_N = ${block_n}
BLOCK_K = ${block_k}
GRID_ORDER = "${grid_order}"  # "mnk": m-tiles outermost, "nmk": n-tiles outermost; k is always innermost
ACC_DTYPE = jnp.${acc_dtype}
BUFFERS = ${buffers}  # pipeline depth of the input blocks: 2 = double buffering, 1 = single (less VMEM)
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _epilogue(acc, bias):
    """acc: [bm, bn] f32 sum over k; bias: [1, bn] in the input dtype, or None."""
    return ${epilogue}


def _tiles(g0, g1):
    """(m-tile, n-tile) of the two outer grid indices under GRID_ORDER."""
    return (g0, g1) if GRID_ORDER == "mnk" else (g1, g0)


def _kernel(*refs, k_steps, has_bias):
    if has_bias:
        a_ref, b_ref, bias_ref, o_ref, acc_ref = refs
    else:
        a_ref, b_ref, o_ref, acc_ref = refs
        bias_ref = None
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a = a_ref[...]  # [bm, bk]
    b = b_ref[...]  # [bk, bn]
    acc_ref[...] += jnp.dot(a, b, preferred_element_type=ACC_DTYPE)  # [bm, bn]

    @pl.when(k == k_steps - 1)
    def _store():
        bias = None if bias_ref is None else bias_ref[...]
        o_ref[...] = _epilogue(acc_ref[...].astype(jnp.float32), bias).astype(o_ref.dtype)


def _spec(shape, index_map):
    if BUFFERS == 2:
        return pl.BlockSpec(shape, index_map)
    return pl.BlockSpec(shape, index_map, pipeline_mode=pl.Buffered(BUFFERS))


def workload(a, b, bias=None):
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk = min(BLOCK_M, m), min(BLOCK_N, n), min(BLOCK_K, k)
    for dim, blk, name in ((m, bm, "M"), (n, bn, "N"), (k, bk, "K")):
        if dim % blk:
            raise ValueError(f"{name}={dim} should be divisible by its block {blk}")
    tm, tn, tk = m // bm, n // bn, k // bk
    grid = (tm, tn, tk) if GRID_ORDER == "mnk" else (tn, tm, tk)

    # a is (m, k): the [bm, bk] tile of this m-tile at k-step kk
    def a_map(g0, g1, kk):
        return _tiles(g0, g1)[0], kk

    # b is (k, n): the [bk, bn] tile of this n-tile at k-step kk
    def b_map(g0, g1, kk):
        return kk, _tiles(g0, g1)[1]

    # bias is (1, n): the [1, bn] slice of this n-tile, fetched once per output tile
    def bias_map(g0, g1, kk):
        return 0, _tiles(g0, g1)[1]

    # out is (m, n): the (i, j) tile stays resident across k and is written back once
    def o_map(g0, g1, kk):
        return _tiles(g0, g1)

    in_specs = [_spec((bm, bk), a_map), _spec((bk, bn), b_map)]
    args = [a, b]
    if bias is not None:
        in_specs.append(pl.BlockSpec((1, bn), bias_map))
        args.append(bias.reshape(1, n))
    itemsize = a.dtype.itemsize
    cost = pl.CostEstimate(
        flops=2 * m * n * k,
        transcendentals=0,
        bytes_accessed=itemsize * (m * k * tn + k * n * tm + m * n),
    )
    return pl.pallas_call(
        functools.partial(_kernel, k_steps=tk, has_bias=bias is not None),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=grid,
        in_specs=in_specs,
        out_specs=pl.BlockSpec((bm, bn), o_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), ACC_DTYPE)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_matmul",
    )(*args)
'''

# The epilogue per operator, written against the task's math (jaxbench/tasks): the dot rounds to the
# input dtype first, then the elementwise tail runs in that dtype, as the reference does.
EPILOGUES = {
    "dense_matmul": "acc",
    "matmul_subtract_multiply_relu": "jnp.maximum(((acc.astype(bias.dtype) + bias) - 2.0) * 1.5, 0)",
    "gemm_add_relu": "jnp.maximum(acc.astype(bias.dtype) + bias, 0)",
}

BLOCKS = (128, 256, 512, 1024, 2048)


def _dims(sizes: Mapping[str, Any]) -> dict[str, int]:
    if "M" in sizes:
        return {"M": int(sizes["M"]), "K": int(sizes["K"]), "N": int(sizes["N"])}
    return {"M": int(sizes["batch_size"]), "K": int(sizes["in_features"]), "N": int(sizes["out_features"])}


def _clamped(c: Mapping[str, Any], d: Mapping[str, int]) -> tuple[int, int, int]:
    return min(c["block_m"], d["M"]), min(c["block_k"], d["K"]), min(c["block_n"], d["N"])


def _problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
    if not d:
        return []
    out = []
    for key, dim, align in (("block_m", "M", 8), ("block_k", "K", 128), ("block_n", "N", 128)):
        if why := divides(int(c[key]), d[dim], align):
            out.append(f"{key}: {dim}={why}")
    return out


def _vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
    bm, bk, bn = _clamped(c, d)
    acc = 4 if c["acc_dtype"] == "float32" else 2
    return int(c["buffers"]) * 2 * (bm * bk + bk * bn) + 2 * 2 * bm * bn + acc * bm * bn


def _cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
    """A rough v6e-like model (0.35 us/step, 1.6 TB/s, 900 TFLOP/s): only orders proposals."""
    bm, bk, bn = _clamped(c, d)
    m, k, n = d["M"], d["K"], d["N"]
    steps = (m // bm) * (n // bn) * (k // bk)
    hbm = 2 * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    fill = min(bm, 256) / 256 * min(bn, 256) / 256
    compute = 2 * m * n * k / (900e12 * fill) * 1e6
    vmem_penalty = 1e6 if _vmem(c, d) > 48 * MiB else 0.0
    return max(compute, hbm / 1.6e12 * 1e6) + 0.35 * steps + vmem_penalty


MATMUL = Template(
    name="matmul",
    operators=tuple(EPILOGUES),
    source=SOURCE,
    tunables={
        "block_m": BLOCKS,
        "block_n": BLOCKS,
        "block_k": BLOCKS,
        "grid_order": ("mnk", "nmk"),
        "acc_dtype": ("float32",),
        "buffers": (2, 1),
    },
    dims_of=_dims,
    problems=_problems,
    vmem_bytes=_vmem,
    cost_us=_cost,
    initial={
        "block_m": 128,
        "block_n": 128,
        "block_k": 128,
        "grid_order": "mnk",
        "acc_dtype": "float32",
        "buffers": 2,
    },
    fixed=lambda op: {"epilogue": EPILOGUES[op]},
    constraints=(
        "M % min(block_m, M) == 0 and block_m % 8 == 0 unless it is the full M",
        "K % min(block_k, K) == 0 and N % min(block_n, N) == 0; both multiples of 128 unless full",
        "buffers x (a tile + b tile) + 2 x out tile + f32 accumulator fits the VMEM limit",
    ),
    grid_axes=lambda c: list(c["grid_order"]),
    semantics=lambda c: ["parallel", "parallel", "arbitrary"],
)
