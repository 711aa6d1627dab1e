"""Grouped (ragged) matmuls from a traced program: each `ragged_dot_general` a Pallas kernel, the rest as traced.

Mosaic has no lowering for `ragged_dot_general`, and the fused templates put it in one kernel body with
every group's weights whole (11p at full: bf16[128, 4096, 1536] in one body, far over VMEM). This serves
a program whose matmuls are all ragged dots of the usual form, lhs [M, K] with rows in consecutive groups,
rhs [G, K, N] (or [G, N, K]), group sizes [G] (MoE experts: 11p, Mixtral's expert MLP). Each becomes a
grouped-matmul kernel: the row tiles are paired with the groups that overlap them (at most tiles + G
pairs, computed from the group sizes outside the kernel and prefetched to SMEM), the grid walks
(N blocks, pairs, K blocks), a pair's rows outside its group are masked to zero, and a row tile's f32
accumulator is stored once, after its last pair. The program's other equations (the router's softmax
is not here: a program with a plain dot_general is left to the other templates) run as traced, in
plain JAX around the kernels. Anything else returns None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.batched_matmul import BLOCKS, block_problems, first_proposal
from maxkernel.tpu_tools.problem.emit import Program, body_lines

SOURCE = '''"""Grouped matmul (offline template `grouped_matmul`), generated from the reference's traced program.

Each lax.ragged_dot_general of the reference runs as the Pallas kernel `_gmm`; the reference's other
equations run as traced, around it. `_gmm` pairs every row tile with each group that overlaps it (the
pairs come from the group sizes, outside the kernel, and are prefetched to SMEM), walks the grid
(N blocks, pairs, K blocks), masks a pair's rows outside its group to zero and stores a row tile's f32
accumulator once, after its last pair: a tile's rows cost one pass per group they meet, not one per group.

Shape-generic: every shape is read from the inputs when the kernel is traced; the blocks were chosen for
the target size (${target}) and clamp to smaller inputs. Rows past the last group are written as zeros
(as lax.ragged_dot does); a last K block past K is masked to zeros on both operands.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_M = ${block_m}
BLOCK_N = ${block_n}
BLOCK_K = ${block_k}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _pairs(group_sizes, m, bm):
    """Per grid step along the pairs: (row tile, group, real?) and each group's [start, end) rows."""
    g = group_sizes.shape[0]
    tiles = pl.cdiv(m, bm)
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    starts = ends - group_sizes.astype(jnp.int32)
    t0 = jnp.arange(tiles, dtype=jnp.int32) * bm
    first = jnp.minimum(jnp.searchsorted(ends, t0, side="right"), g - 1).astype(jnp.int32)
    last = jnp.searchsorted(starts, t0 + bm, side="left").astype(jnp.int32) - 1
    last = jnp.clip(last, first, g - 1)
    count = last - first + 1  # every tile has one pair at least: a tile past the groups is stored as zeros
    offset = jnp.cumsum(count) - count
    step = jnp.arange(tiles + g, dtype=jnp.int32)  # a static bound: each group boundary adds one pair
    tile = jnp.clip(jnp.searchsorted(offset, step, side="right").astype(jnp.int32) - 1, 0, tiles - 1)
    real = step < jnp.sum(count)
    group = jnp.where(real, first[tile] + step - offset[tile], last[tiles - 1])
    return tile, group, real.astype(jnp.int32), starts, ends


def _kernel(tile_ref, group_ref, real_ref, starts_ref, ends_ref, lhs_ref, rhs_ref, o_ref, acc_ref, *, bm, k_total, rhs_nk):
    w, kk = pl.program_id(1), pl.program_id(2)
    nw, nk = pl.num_programs(1), pl.num_programs(2)
    tile, g = tile_ref[w], group_ref[w]
    first = jnp.logical_or(w == 0, tile_ref[jnp.maximum(w - 1, 0)] != tile)
    last = jnp.logical_or(w == nw - 1, tile_ref[jnp.minimum(w + 1, nw - 1)] != tile)

    @pl.when(jnp.logical_and(first, kk == 0))
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(real_ref[w] == 1)
    def _accumulate():
        lhs, rhs = lhs_ref[...], rhs_ref[...]
        rows = tile * bm + lax.broadcasted_iota(jnp.int32, lhs.shape, 0)
        keep = jnp.logical_and(rows >= starts_ref[g], rows < ends_ref[g])
        bk = lhs.shape[1]
        if k_total % bk:  # the last K block runs past K: zero both operands there (garbage * 0 may be NaN)
            left = k_total - kk * bk
            keep = jnp.logical_and(keep, lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < left)
            rhs = jnp.where(lax.broadcasted_iota(jnp.int32, rhs.shape, 1 if rhs_nk else 0) < left, rhs, jnp.zeros_like(rhs))
        lhs = jnp.where(keep, lhs, jnp.zeros_like(lhs))
        dims = (((1,), (1,)), ((), ())) if rhs_nk else (((1,), (0,)), ((), ()))
        acc_ref[...] += lax.dot_general(lhs, rhs, dims, preferred_element_type=jnp.float32)

    @pl.when(jnp.logical_and(last, kk == nk - 1))
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _gmm(lhs, rhs, group_sizes, out_dtype, rhs_nk=False):
    """lhs [M, K] @ rhs[group of the row] ([G, K, N], or [G, N, K] when rhs_nk); rows past the groups are 0."""
    m, k_total = lhs.shape
    n = rhs.shape[1] if rhs_nk else rhs.shape[2]
    bm, bn, bk = min(BLOCK_M, m), min(BLOCK_N, n), min(BLOCK_K, k_total)
    tile, group, real, starts, ends = _pairs(group_sizes, m, bm)

    def lhs_map(j, w, kk, tile, group, real, starts, ends):
        return tile[w], kk

    def rhs_map(j, w, kk, tile, group, real, starts, ends):
        return (group[w], j, kk) if rhs_nk else (group[w], kk, j)

    def o_map(j, w, kk, tile, group, real, starts, ends):
        return tile[w], j

    sq = pl.Squeezed()
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=5,
        grid=(pl.cdiv(n, bn), jnp.sum(real), pl.cdiv(k_total, bk)),  # only the real pairs: a run-time count
        in_specs=[
            pl.BlockSpec((bm, bk), lhs_map),
            pl.BlockSpec((sq, bn, bk) if rhs_nk else (sq, bk, bn), rhs_map),
        ],
        out_specs=pl.BlockSpec((bm, bn), o_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )
    return pl.pallas_call(
        functools.partial(_kernel, bm=bm, k_total=k_total, rhs_nk=rhs_nk),
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        interpret=False,
        name="offline_grouped_matmul",
    )(tile, group, real, starts, ends, lhs, rhs)


def workload(${args}):
    sh = (${shapes})  # every input's shape: the program's shapes are written from these
${body}
    return ${outs}
'''
_DIMS = (
    "dot_dimension_numbers=(((1,), ({c},)), ((), ())), lhs_ragged_dimensions=(0,), rhs_group_dimensions=(0,))"
)


def _form(e: Mapping[str, Any]) -> bool | None:
    """rhs_nk for a ragged dot of the served form ([M, K] x [G, K, N] or [G, N, K]), else None."""
    text = e["params"].get("ragged_dot_dimension_numbers", "").replace(" ", "")
    if str(e["params"].get("group_offset", "None")) != "None":
        return None
    for c, nk in ((1, False), (2, True)):
        if text == "lax.RaggedDotDimensionNumbers(" + _DIMS.format(c=c).replace(" ", ""):
            return nk
    return None


def recognise(program: Program) -> list[dict[str, Any]] | None:
    """Each ragged dot's operands and form, when every matmul of `program` is one we serve; else None."""
    eqns = program["equations"]
    if any(e["primitive"] in ("dot_general", "conv_general_dilated") for e in eqns):
        return None
    out = []
    for i, e in enumerate(eqns):
        if e["primitive"] != "ragged_dot_general":
            continue
        nk = _form(e)
        if nk is None or len(e["inputs"]) != 3 or any(a.startswith("lit:") for a in e["inputs"]):
            return None
        out.append({"eq": i, "lhs": e["inputs"][0], "rhs": e["inputs"][1], "rhs_nk": nk})
    return out or None


def build(program: Program, sym: Symbolic) -> Template | None:
    found = recognise(program)
    if found is None:
        return None
    at = sym.at(sym.target)
    names = program["input_names"]
    eqns = program["equations"]
    shapes = {n: s["shape"] for n, s in zip(names, at["inputs"], strict=True)}  # every value at the target
    for e, outs in zip(eqns, sym.eqn_shapes_at(sym.target), strict=True):
        shapes.update(zip(e["outputs"], outs, strict=True))

    dots = []
    for d in found:
        ls, rs = shapes[d["lhs"]], shapes[d["rhs"]]
        m, k = ls
        g, n = rs[0], (rs[1] if d["rhs_nk"] else rs[2])
        dots.append((m, k, n, g))
    ragged = {eqns[d["eq"]]["outputs"][0]: d for d in found}  # by the ragged dot's output name
    for d in found:  # f32 result cast once to a narrower dtype: the kernel rounds its accumulator to that
        out = eqns[d["eq"]]["outputs"][0]
        users = [e for e in eqns if out in e["inputs"]]
        if (
            out not in program["outputs"]
            and len(users) == 1
            and users[0]["primitive"] == "convert_element_type"
        ):
            d["dtype"] = users[0]["out_specs"][0]["dtype"]

    def extra(e: Mapping[str, Any], expr: str) -> str:
        d = ragged.get(e["outputs"][0]) if e["primitive"] == "ragged_dot_general" else None
        if d is None:
            return expr
        lhs, rhs, gs = e["inputs"]
        dtype = d.get("dtype", e["out_specs"][0]["dtype"])
        return f"_gmm({lhs}, {rhs}, {gs}, jnp.{dtype}, rhs_nk={d['rhs_nk']})"

    body = body_lines(program, extra=extra, sym=sym, mosaic=False)
    if sym.unsolved:
        return None
    item = 2 if any("16" in s["dtype"] for s in at["inputs"]) else 4

    def blocks(c: Mapping[str, Any], m: int, k: int, n: int) -> tuple[int, int, int]:
        return min(int(c["block_m"]), m), min(int(c["block_n"]), n), min(int(c["block_k"]), k)

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        need = 0
        for m, k, n, _g in dots:
            bm, bn, bk = blocks(c, m, k, n)
            need = max(need, 2 * item * (bm * bk + bk * bn) + 2 * 4 * bm * bn + 4 * bm * bn)
        return int(need)

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        total = 0.0
        for m, k, n, g in dots:
            bm, bn, bk = blocks(c, m, k, n)
            pairs = -(-m // bm) + g
            steps = -(-n // bn) * pairs * -(-k // bk)
            hbm = item * (-(-n // bn) * pairs * bm * k + g * k * n + m * n)
            total += hbm / 1.6e12 * 1e6 + 0.35 * steps
        return total + (1e6 if vmem(c, d) > 48 * MiB else 0.0)

    initial = first_proposal(vmem, cost)
    outs = ", ".join(program["outputs"])
    fixed = {
        "args": ", ".join(names),
        "shapes": "".join(f"{n}.shape, " for n in names),
        "body": "\n".join(f"    {line}" for line in body),
        "outs": outs,
        "target": f"{sym.target}: " + "; ".join(f"M={m}, K={k}, N={n}, G={g}" for m, k, n, g in dots),
    }
    return Template(
        name="grouped_matmul",
        operators=("program",),
        source=SOURCE,
        tunables={"block_m": BLOCKS, "block_n": BLOCKS, "block_k": BLOCKS},
        dims_of=lambda sizes: {"M": dots[0][0], "K": dots[0][1], "N": dots[0][2], "G": dots[0][3]},
        problems=block_problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: fixed,
        constraints=("block_m, block_n, block_k multiples of 128 (clamped; a K tail is masked)",),
        grid_axes=lambda c: ["n", "pairs", "k"],
        semantics=lambda c: ["parallel", "arbitrary", "arbitrary"],
    )
