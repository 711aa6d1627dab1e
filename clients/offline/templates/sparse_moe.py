"""A dense top-k mixture of experts written sparsely: route, sort by expert, two grouped matmuls, combine.

clients/offline/dense_moe.py proves the program is a dense top-k mixture (every expert on every token,
weights a one-hot of top_k's indices times values) and finds its parts. This writes what an expert
writes instead: the reference's own routing equations in plain JAX (logits, top_k, its weights), the
(token, choice) pairs sorted by expert, the tokens gathered in that order, a grouped matmul over the
expert weights of the first layer (gate and up together: one row tile read once for both, the
reference's epilogue equations, SwiGLU's silu(g) * u, run on the tile before one store), a grouped matmul
over the down weights, and the combine in the reference's dtype (f32): each token's chosen experts'
outputs, back in token order, times the reference's own weights at those experts. The expert work is
top_k/N of the dense reference's (10p: a quarter).

The grouped matmuls walk (N blocks, K blocks, row tiles) with every block index affine in the grid: each
step multiplies one row tile by the [K block, N block] of every expert that tile meets (a loop over its
groups, counted at run time; rows outside a group masked), every expert's block stays in VMEM while the
row tiles stream past it, and the f32 accumulators and the output's column block hold all rows. So the
weights are read from HBM once, the tokens once per N block, and the block schedule is what a static
estimate sees (an index read from the routing would be charged a fetch every step). Where a row tile
meets two experts it runs both matmuls: the cost model charges that (a tile per group boundary), which
keeps row tiles small against the 8 experts' boundaries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dense_moe import DenseMoE, NotDenseMoE, recognise
from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.subprogram import subprogram
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.tpu_tools.problem.emit import Program, body_lines

SOURCE = '''"""Sparse top-k mixture of experts (offline template `sparse_moe`), from the reference's traced program.

The reference runs every expert on every token and combines with weights that are a one-hot of top_k's
indices times values: a token's terms for experts it did not choose are exact zeros. This computes only
the chosen ones: the reference's routing equations, the (token, choice) pairs sorted by expert, `_gmm`
over the first expert weights with the reference's epilogue on each tile (`_expert_epilogue`), `_gmm`
over the down weights, and the combine in the reference's dtype with the reference's weights.

`_gmm` walks (N blocks, K blocks, row tiles): a row tile meets the few experts whose rows it holds (a
loop from its first to its last, their bounds prefetched to SMEM), every expert's block of the weights
stays in VMEM across the row tiles, and the f32 accumulators and the output's column block hold all
rows; the epilogue runs on a tile after the last K block. Blocks chosen for the target (${target}); they
clamp to smaller inputs, and a K block that does not divide K becomes the whole K.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_M = ${block_m}
BLOCK_N = ${block_n}  # the first layer's (gate/up) columns
BLOCK_K = ${block_k}
BLOCK_N_DOWN = ${block_n_down}
BLOCK_K_DOWN = ${block_k_down}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
NUM_EXPERTS = ${num_experts}


def _tiles(group_sizes, m, bm):
    """Per row tile: the first and last group (expert) it meets; per group: its [start, end) rows."""
    g = group_sizes.shape[0]
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    starts = ends - group_sizes.astype(jnp.int32)
    t0 = jnp.arange(pl.cdiv(m, bm), dtype=jnp.int32) * bm
    first = jnp.minimum(jnp.searchsorted(ends, t0, side="right"), g - 1).astype(jnp.int32)
    last = jnp.searchsorted(starts, jnp.minimum(t0 + bm, m), side="left").astype(jnp.int32) - 1
    return first, jnp.clip(last, first, g - 1), starts, ends


def _expert_epilogue(${epi_args}):
    """The reference's own equations from the first expert matmuls to the down matmul's operand, on a tile
    (each matmul's f32 accumulator rounded to its dtype first, as the reference rounds it)."""
${epi_body}
    return ${epi_out}


def _round_down(acc):
    return acc.astype(jnp.${down_dtype})


def _kernel(first_ref, last_ref, starts_ref, ends_ref, lhs_ref, *refs, n_rhs, bm, rhs_nk, epilogue, all_rows, k_total, nk):
    rhs_refs, o_ref, acc_refs = refs[:n_rhs], refs[n_rhs], refs[n_rhs + 1 :]
    kk, t = pl.program_id(1), pl.program_id(2)
    r0 = pl.multiple_of(t * bm, bm)
    a0 = r0 if all_rows else 0  # K tiled: the accumulators hold every row tile across the K blocks
    bn = o_ref.shape[1]

    @pl.when(kk == 0)
    def _init():
        for acc_ref in acc_refs:
            acc_ref[pl.ds(a0, bm), :] = jnp.zeros((bm, bn), jnp.float32)

    lhs = lhs_ref[...]  # [bm, bk]: rows t*bm.. of the expert-sorted operand
    rows = r0 + lax.broadcasted_iota(jnp.int32, (bm, bn), 0)
    dims = (((1,), (1,)), ((), ())) if rhs_nk else (((1,), (0,)), ((), ()))
    bk = lhs.shape[1]
    # a last K block past K: zero both operands there (garbage * 0 may be NaN). Always written when K is
    # tiled, so the body the judge checks at small sizes (a tail) is the body that runs at the target (none)
    left = k_total - kk * bk
    if nk > 1:
        lhs = jnp.where(lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < left, lhs, jnp.zeros_like(lhs))

    def weight(rhs_ref, g):
        w = rhs_ref[g]  # [bk, bn] (or [bn, bk])
        if nk > 1:
            w = jnp.where(lax.broadcasted_iota(jnp.int32, w.shape, 1 if rhs_nk else 0) < left, w, jnp.zeros_like(w))
        return w

    def group(g, carry):  # the tile's rows of expert g times expert g's weights (other rows add 0)
        keep = jnp.logical_and(rows >= starts_ref[g], rows < ends_ref[g])
        for rhs_ref, acc_ref in zip(rhs_refs, acc_refs):
            part = lax.dot_general(lhs, weight(rhs_ref, g), dims, preferred_element_type=jnp.float32)  # [bm, bn]
            acc_ref[pl.ds(a0, bm), :] += jnp.where(keep, part, 0.0)
        return carry

    lax.fori_loop(first_ref[t], last_ref[t] + 1, group, 0)  # usually one expert, two at a boundary

    @pl.when(kk == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = epilogue(*(acc_ref[pl.ds(a0, bm), :] for acc_ref in acc_refs)).astype(o_ref.dtype)


def _gmm(lhs, rhs, group_sizes, out_dtype, epilogue, *, rhs_nk, block_n, block_k):
    """epilogue(lhs [M, K] @ w[group of the row] for w in rhs ([G, K, N], or [G, N, K] when rhs_nk)).

    Grid (N blocks, K blocks, row tiles), no block index read from the routing: a row tile streams past
    every expert's [K block, N block] of each weight, fetched once per (N, K) block. With one K block
    the weights' column block is single-buffered (it changes once per N block); with several, the f32
    accumulators hold every row tile and a tile's output is written back only on the last K block."""
    m, k_total = lhs.shape
    g, n = rhs[0].shape[0], (rhs[0].shape[1] if rhs_nk else rhs[0].shape[2])
    bm, bn, bk = min(BLOCK_M, m), min(block_n, n), min(block_k, k_total)
    tiles, nk = pl.cdiv(m, bm), pl.cdiv(k_total, bk)  # a last K block past K is masked
    first, last, starts, ends = _tiles(group_sizes, m, bm)

    def lhs_map(j, kk, t, *_):
        return t, kk  # row tile t, K block kk

    def rhs_map(j, kk, t, *_):
        return (0, j, kk) if rhs_nk else (0, kk, j)  # every expert's block

    def o_map(j, kk, t, *_):
        return jnp.where(kk == nk - 1, t, 0), j  # moves (and is written back) on the last K block only

    mode = dict(pipeline_mode=pl.Buffered(1)) if nk == 1 else {}
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4,
        grid=(pl.cdiv(n, bn), nk, tiles),
        in_specs=[pl.BlockSpec((bm, bk), lhs_map)]
        + [pl.BlockSpec((g, bn, bk) if rhs_nk else (g, bk, bn), rhs_map, **mode) for _ in rhs],
        out_specs=pl.BlockSpec((bm, bn), o_map),
        scratch_shapes=[pltpu.VMEM((tiles * bm if nk > 1 else bm, bn), jnp.float32) for _ in rhs],
    )
    return pl.pallas_call(
        functools.partial(
            _kernel, n_rhs=len(rhs), bm=bm, rhs_nk=rhs_nk, epilogue=epilogue, all_rows=nk > 1, k_total=k_total, nk=nk
        ),
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        interpret=False,
        name="offline_sparse_moe",
    )(first, last, starts, ends, lhs, *rhs)


def _sort_by_expert(indices):
    """(order, group sizes): the flat (token, choice) pairs sorted by expert, stably."""
    flat = indices.reshape(-1).astype(jnp.int32)
    order = jnp.argsort(flat, stable=True).astype(jnp.int32)
    experts = jnp.arange(NUM_EXPERTS, dtype=jnp.int32)
    sizes = jnp.sum((flat[:, None] == experts[None, :]).astype(jnp.int32), axis=0)
    return order, sizes


def workload(${args}):
    sh = (${shapes})  # every input's shape: the routing's shapes are written from these
${router}
    x = ${x}.reshape(-1, ${x}.shape[-1])  # [T, E]
    t, k = x.shape[0], ${indices}.shape[-1]
    order, sizes = _sort_by_expert(${indices})
    xs = jnp.take(x, order // k, axis=0, mode="clip")  # [T*K, E] grouped by expert (in bounds: no fill)
    h = _gmm(xs, (${first_weights}), sizes, jnp.${hidden_dtype}, _expert_epilogue, rhs_nk=${first_nk}, block_n=BLOCK_N, block_k=BLOCK_K)
    y = _gmm(h, (${down_weight},), sizes, jnp.${down_dtype}, _round_down, rhs_nk=${down_nk}, block_n=BLOCK_N_DOWN, block_k=BLOCK_K_DOWN)
    back = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=jnp.int32)).reshape(t, k)
    w = jnp.take_along_axis(${weights}.reshape(t, -1), ${indices}.reshape(t, k).astype(jnp.int32), axis=1)
    # the reference's terms at its chosen experts (the others are exact zeros), summed in its dtype in
    # choice order: each a gather of the token's row of y, fused with the product and the sum
    out = None
    for c in range(k):
        y_c = jnp.take(y, back[:, c], axis=0, mode="clip")  # [T, E_out]
        term = w[:, c : c + 1].astype(jnp.${combine_dtype}) * y_c.astype(jnp.${combine_dtype})
        out = term if out is None else out + term
    return out.reshape(${x}.shape[:-1] + (out.shape[-1],))
'''

# The chip the block choice is tuned for (v6e: 918 TFLOP/s bf16, 1.64 TB/s HBM), and a grid step's floor
MXU_FLOPS = 918e12
HBM_BYTES_PER_S = 1.6e12
STEP_US = 0.35
CLOCK_MHZ = 1750
# Grid steps the first proposal may take at a check size: the judge validates in TPU interpret mode within
# 300 s, about a second a step on a loaded 2-core box (10p's derived size at 256-row tiles, 160 steps, timed out;
# 512-row tiles, 80 steps, are the most it leaves)
CHECK_STEPS = 96
ACC_BUNDLES_PER_VREG = 2.3  # an f32 accumulator vreg's load, select, add and store (v6e LLO: 2-2.6)
VMEM_BUDGET = 58 * MiB  # under the 64 MiB scoped limit the kernels ask for
BLOCKS = (128, 256, 512, 1024, 2048)
K_BLOCKS = (*BLOCKS, 4096, 16384)  # K whole: one K block (Mixtral's E = 4096)


def why_not(program: Program) -> str | None:
    """None when `program` is a dense top-k mixture this template writes, else why not."""
    try:
        recognise(program)
    except NotDenseMoE as e:
        return str(e)
    return None


def build(program: Program, sym: Symbolic) -> Template | None:
    """The template for a dense top-k mixture, or None when `program` is none (dense_moe.recognise)."""
    try:
        moe = recognise(program)
    except NotDenseMoE:
        return None
    return _template(program, sym, moe)


def _template(program: Program, sym: Symbolic, moe: DenseMoE) -> Template | None:
    eqns = program["equations"]
    names = program["input_names"]
    at = sym.at(sym.target)
    shapes = {n: s["shape"] for n, s in zip(names, at["inputs"], strict=True)}
    for e, outs in zip(eqns, sym.eqn_shapes_at(sym.target), strict=True):
        shapes.update(zip(e["outputs"], outs, strict=True))
    router = subprogram(program, moe.router, names, [moe.x, moe.indices, moe.weights])
    rsym = Symbolic(router)
    lines = body_lines(router, sym=rsym, mosaic=False)
    if rsym.unsolved:
        return None
    dot_outs = [eqns[d.eq]["outputs"][0] for d in moe.first]
    args = [f"a{j}" for j in range(len(moe.first))]
    epi = [f"{o} = {a}.astype(jnp.{d.dtype})" for o, a, d in zip(dot_outs, args, moe.first, strict=True)]
    if moe.epilogue:
        tile = subprogram(program, moe.epilogue, dot_outs, [moe.hidden])
        epi += body_lines(tile, mosaic=True)

    def dims_at(size: str) -> tuple[tuple[int, int, int, int, str, str], ...]:
        """(M rows, K, N, weights per kernel, block names) of the two grouped matmuls at `size`."""
        at = sym.at(size)
        shapes = {n: s["shape"] for n, s in zip(names, at["inputs"], strict=True)}
        for e, outs in zip(eqns, sym.eqn_shapes_at(size), strict=True):
            shapes.update(zip(e["outputs"], outs, strict=True))
        rows = math.prod(shapes[moe.indices])  # T * K pairs
        w1, w2 = shapes[moe.first[0].weight], shapes[moe.down.weight]
        f_dim = w1[1] if moe.first[0].rhs_nk else w1[2]
        o_dim = w2[1] if moe.down.rhs_nk else w2[2]
        return (
            (rows, shapes[moe.x][-1], f_dim, len(moe.first), "block_n", "block_k"),
            (rows, f_dim, o_dim, 1, "block_n_down", "block_k_down"),
        )

    gmms = dims_at(sym.target)
    checks = [dims_at(size) for size in sym.sizes if size != sym.target]  # where the judge interprets it
    rows, e_dim, f_dim = gmms[0][:3]
    groups, n_first = moe.num_experts, len(moe.first)
    item = 2 if "16" in _dtype(program, moe.x) else 4

    def blocks(c: Mapping[str, Any], m: int, k: int, n: int, bn: str, bk: str) -> tuple[int, int, int]:
        return min(int(c["block_m"]), m), min(int(c[bn]), n), min(int(c[bk]), k)

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        need = 0
        for m, k, n, nw, bn, bk in gmms:
            b_m, b_n, b_k = blocks(c, m, k, n, bn, bk)
            one_k = b_k >= k
            rhs = (1 if one_k else 2) * nw * groups * b_k * b_n * item  # every expert's block
            acc = nw * 4 * b_n * (b_m if one_k else -(-m // b_m) * b_m)
            temps = 3 * nw * 4 * b_m * b_n  # a tile's f32 product, its masked copy, the row iota
            need = max(need, 2 * item * b_m * b_k + rhs + 2 * item * b_m * b_n + acc + temps)
        return int(need)

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        total = 0.0
        for m, k, n, nw, bn, bk in gmms:
            b_m, b_n, b_k = blocks(c, m, k, n, bn, bk)
            tiles, nj, nk = -(-m // b_m), -(-n // b_n), -(-k // b_k)
            # a tile meets two experts at each of the G - 1 boundaries: both matmuls run
            mxu = 2 * b_m * b_k * b_n * nw / MXU_FLOPS * 1e6 * (tiles + min(groups - 1, tiles)) / tiles
            acc = ACC_BUNDLES_PER_VREG * nw * b_m * b_n / 1024 / CLOCK_MHZ  # each step's read-modify-write
            lhs = item * b_m * b_k / HBM_BYTES_PER_S * 1e6
            out = item * b_m * b_n / HBM_BYTES_PER_S * 1e6  # a tile's output, on the last K block
            step = max(STEP_US, mxu + acc, lhs)
            rhs = item * nw * groups * b_k * b_n / HBM_BYTES_PER_S * 1e6  # at each new (N, K) block
            total += nj * nk * tiles * step + nj * tiles * max(0.0, lhs + out - step)
            total += nj * nk * max(0.0, rhs + lhs - step)
        return total + (1e6 if vmem(c, d) > VMEM_BUDGET else 0.0)

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        return [f"{k}={c[k]} is not one of {list(tunables[k])}" for k in c if c[k] not in tunables[k]]

    tunables = {
        **{k: BLOCKS for k in ("block_m", "block_n", "block_n_down")},
        **{k: K_BLOCKS for k in ("block_k", "block_k_down")},
    }
    configs = [dict(zip(tunables, v, strict=True)) for v in itertools.product(*tunables.values())]

    def k_checked(c: Mapping[str, Any]) -> bool:
        """One K block at the target and every check size, or several at each: the judge refuses a kernel
        whose accumulate-across-K path runs at the target only (shape_specialized)."""
        for j, (m, k, n, _nw, bn, bk) in enumerate(gmms):
            several = [blocks(c, *d[j][:3], bn, bk)[2] < d[j][1] for d in checks]
            if any(s != (blocks(c, m, k, n, bn, bk)[2] < k) for s in several):
                return False
        return True

    def check_steps(c: Mapping[str, Any]) -> int:
        """Grid steps at the largest check size: TPU interpret mode takes about a second a step there."""
        steps = [0]
        for dims in checks:
            total = 0
            for m, k, n, _nw, bn, bk in dims:
                b_m, b_n, b_k = blocks(c, m, k, n, bn, bk)
                total += -(-m // b_m) * -(-n // b_n) * -(-k // b_k)
            steps.append(total)
        return max(steps)

    fitting = [c for c in configs if vmem(c, {}) <= VMEM_BUDGET]
    fitting = [c for c in fitting if check_steps(c) <= CHECK_STEPS and k_checked(c)] or fitting or configs[:1]
    initial = min(fitting, key=lambda c: (cost(c, {}), -c["block_k"]))
    fixed = {
        "args": ", ".join(names),
        "shapes": "".join(f"{n}.shape, " for n in names),
        "router": "\n".join(f"    {line}" for line in lines),
        "x": moe.x,
        "indices": moe.indices,
        "weights": moe.weights,
        "first_weights": ", ".join(d.weight for d in moe.first) + ("," if n_first == 1 else ""),
        "first_nk": str(moe.first[0].rhs_nk),
        "down_weight": moe.down.weight,
        "down_nk": str(moe.down.rhs_nk),
        "hidden_dtype": _dtype(program, moe.hidden),
        "down_dtype": moe.down.dtype,
        "combine_dtype": moe.combine_dtype,
        "num_experts": str(groups),
        "epi_args": ", ".join(args),
        "epi_body": "\n".join(f"    {line}" for line in epi),
        "epi_out": moe.hidden,
        "target": f"{sym.target}: {rows} (token, choice) rows, E={e_dim}, F={f_dim}, {groups} experts",
    }
    return Template(
        name="sparse_moe",
        operators=("program",),
        source=SOURCE,
        tunables=tunables,
        dims_of=lambda sizes: {"M": rows, "K": e_dim, "N": f_dim, "G": groups},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: fixed,
        constraints=("blocks multiples of 128 (clamped to the dims; a K block that does not divide K is K)",),
        grid_axes=lambda c: ["n", "k", "row tiles"],
        semantics=lambda c: ["parallel", "arbitrary", "arbitrary"],
    )


def _dtype(program: Program, name: str) -> str:
    for e in program["equations"]:
        if name in e["outputs"]:
            return e["out_specs"][e["outputs"].index(name)]["dtype"]
    return program["inputs"][program["input_names"].index(name)]["dtype"]
