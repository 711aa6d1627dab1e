"""A gated MLP from a traced program in two k-tiled passes: the hidden activation makes one HBM round
trip so that every matmul tile is large enough to keep the MXU busy.

mlp_chain fuses the whole MLP into one pass, which must keep a [rows, E_out] f32 sum resident: at a
production width (E 8192, H 28672) only small row blocks fit VMEM, every weight then streams from HBM
once per row block, and the kernel is memory-bound. This template serves the same programs
(mlp_chain.recognise) with two pallas_calls: pass 1 tiles (rows, hidden, emb chunks) and accumulates
each up-projection in f32, then on the last emb chunk rounds them as the reference does and runs its
hidden chain, storing h [M, H] once; pass 2 is a k-tiled h @ W_down (rows, output columns, hidden
chunks) whose last step runs the reference's epilogue (a residual add) on the finished tile. The
offline model takes whichever of the two templates its cost model finds cheaper (base.cheapest).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.mlp_chain import source_parts
from maxkernel.clients.offline.templates.tile_cost import branch_us, flops_us
from maxkernel.tpu_tools.problem.emit import Program, var_dtypes

SOURCE = '''"""Gated MLP in two passes (offline template `mlp_two_pass`), generated from the reference's traced program.

Pass 1, grid (row blocks, hidden blocks, emb chunks), emb innermost and "arbitrary": each up-projection
accumulates in its own f32 VMEM buffer; on the last emb chunk each is rounded to the reference's dtype
and the reference's own elementwise ops make the [rows, hidden] block of h, stored once to HBM. Pass 2,
grid (row blocks, output column blocks, hidden chunks): h @ W_down accumulated in f32, stored on the last
hidden chunk through the reference's equations after the down-projection (if any). h makes one HBM
round trip; in exchange no weight streams once per small row block, as a one-pass kernel's must. Each
dot runs as XLA runs the reference's on a TPU (`_mxu_dot`: ${dot_note}).

Shape-generic: every shape is read from the inputs when the kernel is traced; the blocks were chosen
for the target size (${target}) and clamp to smaller inputs. A last block past a contracted axis (emb
in pass 1, hidden in pass 2) is masked on both operands; a last row or column block past the output
is partial (its extra rows and columns are never stored).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}
BLOCK_HIDDEN = ${block_hidden}
BLOCK_EMB = ${block_emb}
BLOCK_OUT = ${block_out}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
DIMS = (((1,), (0,)), ((), ()))  # [rows, k] @ [k, cols]


${mxu_dot}

UP_DOTS = (${up_dot_fns},)  # each up-projection's dot, in the reference's order
UP_DTYPES = (${up_dtypes},)  # each up-projection's output dtype: rounded to it before the chain


def _hidden(${ups}):
    """The reference's equations from the up-projections to the hidden activation, on one block."""
${chain}
    return ${h}


def _epilogue(${epi_params}):
    """The reference's equations after the down-projection, on one finished output tile."""
${epi_chain}
    return ${out}


def _masked(a, axis, left):
    """`a` with its entries from index `left` on along `axis` zeroed: a partial block's tail is garbage."""
    keep = lax.broadcasted_iota(jnp.int32, a.shape, axis) < left
    return jnp.where(keep, a, jnp.zeros_like(a))


def _up_kernel(x_ref, *refs, e_total):
    n_up = len(UP_DOTS)
    w_refs, h_ref, acc_refs = refs[:n_up], refs[n_up], refs[n_up + 1 :]
    k = pl.program_id(2)
    be = x_ref.shape[1]

    @pl.when(k == 0)
    def _init():
        for acc_ref in acc_refs:
            acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]  # [block_rows, block_emb]
    if e_total % be:  # the last emb chunk runs past E: zero its x columns (and each weight's rows)
        x = _masked(x, 1, e_total - k * be)
    for w_ref, acc_ref, dot in zip(w_refs, acc_refs, UP_DOTS):
        w = w_ref[...]  # [block_emb, block_hidden]
        if e_total % be:
            w = _masked(w, 0, e_total - k * be)
        acc_ref[...] += dot(x, w, DIMS)  # [block_rows, block_hidden] f32

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        ups = [acc_ref[...].astype(dtype) for acc_ref, dtype in zip(acc_refs, UP_DTYPES)]
        h_ref[...] = _hidden(*ups).astype(h_ref.dtype)  # [block_rows, block_hidden]


def _down_kernel(h_ref, w_ref, *refs, h_total):
    *res_refs, o_ref, acc_ref = refs
    k = pl.program_id(2)
    bh = h_ref.shape[1]

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    h = h_ref[...]  # [block_rows, block_hidden]
    w = w_ref[...]  # [block_hidden, block_out]
    if h_total % bh:  # the last hidden chunk runs past H: zero its h columns and W_down rows
        h, w = _masked(h, 1, h_total - k * bh), _masked(w, 0, h_total - k * bh)
    acc_ref[...] += ${down_dot}(h, w, DIMS)  # [block_rows, block_out] f32

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        ${down_out} = acc_ref[...].astype(jnp.${down_dtype})
        o_ref[...] = _epilogue(${down_out}, *(r[...] for r in res_refs)).astype(o_ref.dtype)


def _up_pass(x, ws, bm, bh, be):
    """h = the hidden chain of x's up-projections, [M, H] in the reference's dtype."""
    m, e = x.shape
    h_total = ws[0].shape[1]

    def x_map(i, j, k):  # x is (m, e): the [bm, be] tile of row block i at emb chunk k
        return i, k

    def w_map(i, j, k):  # each up weight is (e, h): the [be, bh] tile of hidden block j at emb chunk k
        return k, j

    def h_map(i, j, k):  # h is (m, h): block (i, j) stays resident across the emb chunks
        return i, j

    grid = (pl.cdiv(m, bm), pl.cdiv(h_total, bh), pl.cdiv(e, be))
    item = x.dtype.itemsize
    return pl.pallas_call(
        functools.partial(_up_kernel, e_total=e),
        out_shape=jax.ShapeDtypeStruct((m, h_total), jnp.${h_dtype}),
        grid=grid,
        in_specs=[pl.BlockSpec((bm, be), x_map), *(pl.BlockSpec((be, bh), w_map) for _ in ws)],
        out_specs=pl.BlockSpec((bm, bh), h_map),
        scratch_shapes=[pltpu.VMEM((bm, bh), jnp.float32) for _ in ws],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=pl.CostEstimate(
            flops=2 * len(ws) * m * e * h_total,
            transcendentals=${transcendentals} * m * h_total,
            bytes_accessed=item * (m * e * grid[1] + len(ws) * e * h_total * grid[0] + m * h_total),
        ),
        interpret=False,
        name="offline_mlp_up",
    )(x, *ws)


def _down_pass(h, w, residuals, bm, bh, bn):
    """The down-projection h @ w and the reference's epilogue, [M, E_out]."""
    m, h_total = h.shape
    e_out = w.shape[1]

    def h_map(i, j, k):  # h is (m, h): the [bm, bh] tile of row block i at hidden chunk k
        return i, k

    def w_map(i, j, k):  # W_down is (h, e_out): the [bh, bn] tile of column block j at hidden chunk k
        return k, j

    def o_map(i, j, k):  # the output (and each residual) is (m, e_out): tile (i, j), resident across k
        return i, j

    grid = (pl.cdiv(m, bm), pl.cdiv(e_out, bn), pl.cdiv(h_total, bh))
    item = h.dtype.itemsize
    return pl.pallas_call(
        functools.partial(_down_kernel, h_total=h_total),
        out_shape=jax.ShapeDtypeStruct((m, e_out), jnp.${out_dtype}),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bm, bh), h_map),
            pl.BlockSpec((bh, bn), w_map),
            *(pl.BlockSpec((bm, bn), o_map) for _ in residuals),
        ],
        out_specs=pl.BlockSpec((bm, bn), o_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * h_total * e_out,
            transcendentals=0,
            bytes_accessed=item * (m * h_total * grid[1] + h_total * e_out * grid[0] + m * e_out),
        ),
        interpret=False,
        name="offline_mlp_down",
    )(h, w, *residuals)


def workload(${args}):
    lead = ${x}.shape[:-1]
    rows_x = ${x}.reshape(-1, ${x}.shape[-1])  # [M, E]: the row axes merged
    m, e = rows_x.shape
    h_total, e_out = ${down}.shape
    bm, bh = min(BLOCK_ROWS, m), min(BLOCK_HIDDEN, h_total)
    be, bn = min(BLOCK_EMB, e), min(BLOCK_OUT, e_out)
    h = _up_pass(rows_x, (${up_args},), bm, bh, be)  # [M, H]
    out = _down_pass(h, ${down}, (${res_args}), bm, bh, bn)  # [M, E_out]
    return out.reshape(lead + (e_out,))
'''

TRANSCENDENTAL = {"logistic", "exp", "exp2", "log", "log1p", "tanh", "erf", "sin", "cos", "rsqrt", "sqrt"}
ROWS = (128, 256, 512, 1024, 2048)
HIDDEN = (256, 512, 1024, 2048)
EMB = (256, 512, 1024, 2048)
OUT = (256, 512, 1024, 2048, 4096)
# what the first proposal may use of the kernel's 64 MiB scoped VMEM (mlp_chain's margin)
INITIAL_VMEM_BYTES = 40 * MiB


def build(program: Program, sym: Symbolic) -> Template | None:
    """The two-pass template of a gated-MLP program, or None (not one: the caller keeps its own)."""
    p = source_parts(program, sym)
    if p is None:
        return None
    r, eqns = p["roles"], program["equations"]
    dtypes = var_dtypes(program)
    res = r["residuals"]
    m_t, e_t, h_t, eo_t, item = p["m"], p["e"], p["h"], p["e_out"], p["item"]
    h_item = 2 if "16" in dtypes[r["h"]] else 4
    out_item = 2 if "16" in program["out_specs"][0]["dtype"] else 4
    n_up, n_res = len(p["up_w"]), len(res)
    fixed = {
        **p["fixed"],
        "up_dot_fns": ", ".join(p["dot_fns"][:-1]),
        "up_dtypes": ", ".join(f"jnp.{eqns[i]['out_specs'][0]['dtype']}" for i in r["ups"]),
        "h_dtype": dtypes[r["h"]],
        "transcendentals": str(sum(eqns[i]["primitive"] in TRANSCENDENTAL for i in r["chain"])),
        "res_args": "".join(f"{n}.reshape(-1, e_out), " for n in res),
        "target": f"{sym.target}: M={m_t}, E={e_t}, H={h_t}, E_out={eo_t}",
    }
    rows = ROWS if item == 2 else (64, *ROWS[:-1])

    def blocks(c: Mapping[str, Any]) -> tuple[int, int, int, int]:
        return (
            min(int(c["block_rows"]), m_t),
            min(int(c["block_hidden"]), h_t),
            min(int(c["block_emb"]), e_t),
            min(int(c["block_out"]), eo_t),
        )

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        """The larger pass's double-buffered tiles and f32 accumulators: the scoped VMEM Mosaic reports
        for them (9p at 1024-row tiles: 24.1 MiB pass 1, 28.1 MiB pass 2 with 2048 output columns)."""
        bm, bh, be, bn = blocks(c)
        up = 2 * item * (bm * be + n_up * be * bh) + 2 * h_item * bm * bh + 4 * n_up * bm * bh
        down = 2 * h_item * bm * bh + 2 * item * bh * bn + 2 * out_item * bm * bn * (1 + n_res) + 4 * bm * bn
        return int(max(up, down))

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        legal = {"block_rows": rows, "block_hidden": HIDDEN, "block_emb": EMB, "block_out": OUT}
        return [f"{k}={c[k]} is not one of {list(v)}" for k, v in legal.items() if int(c[k]) not in v]

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        """Each pass at its roofline (x re-read per hidden block, the up weights per row block; h per
        output column block, W_down per row block), its last-step branches, 0.35 us a grid step."""
        bm, bh, be, bn = blocks(c)
        rs, hs, es, ns = (-(-t // b) for t, b in ((m_t, bm), (h_t, bh), (e_t, be), (eo_t, bn)))
        up_hbm = item * (m_t * e_t * hs + n_up * e_t * h_t * rs) + h_item * m_t * h_t
        up = sum(flops_us(m_t, e_t, h_t, bm, bh, k) for k in p["kinds"][:-1])
        down_hbm = h_item * m_t * h_t * ns + item * h_t * eo_t * rs + out_item * m_t * eo_t * (1 + n_res)
        down = flops_us(m_t, h_t, eo_t, bm, bn, p["kinds"][-1])
        steps = rs * hs * es + rs * ns * hs
        # the last step's branches: pass 1 rounds the ups, runs the chain, stores h; pass 2 the epilogue
        stores = branch_us(m_t * h_t, n_up + len(r["chain"]) + 1)
        stores += branch_us(m_t * eo_t, len(r["epilogue"]) + 2)
        penalty = 1e6 if vmem(c, d) > 48 * MiB else 0.0
        up_us, down_us = max(up, up_hbm / 1.6e12 * 1e6), max(down, down_hbm / 1.6e12 * 1e6)
        return up_us + down_us + stores + 0.35 * steps + penalty

    tunables = {"block_rows": rows, "block_hidden": HIDDEN, "block_emb": EMB, "block_out": OUT}
    template = Template(
        name="mlp_two_pass",
        operators=("program",),
        source=SOURCE,
        tunables=tunables,
        dims_of=lambda sizes: {"M": m_t, "E": e_t, "H": h_t},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        fixed=lambda op: fixed,
        constraints=(
            f"block_rows in {list(rows)}",
            f"block_hidden in {list(HIDDEN)} (pass 1's h columns, pass 2's contraction chunk)",
            f"block_emb in {list(EMB)} (pass 1's contraction chunk; a last chunk past E is masked)",
            f"block_out in {list(OUT)} (pass 2's output columns)",
        ),
        grid_axes=lambda c: ["rows", "hidden", "emb"],  # pass 1's; pass 2's is (rows, out, hidden)
        semantics=lambda c: ["parallel", "parallel", "arbitrary"],
    )
    fits = [c for c in template.configs() if vmem(c, {}) <= INITIAL_VMEM_BYTES]
    # the first proposal: the cheapest fitting config, the one needing less VMEM on ties
    initial = min(fits or template.configs(), key=lambda c: (cost(c, {}), vmem(c, {})))
    return dataclasses.replace(template, initial=initial)
