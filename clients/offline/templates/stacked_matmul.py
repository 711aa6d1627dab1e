"""A projection by a stacked weight from a traced program: x [M..., K] against w [G, K, N] (or [K, N],
[G, N, K], [N, K]), either operand first in the dot, the result laid out [M..., G, N] or, through one
transpose, [G, M..., N], with an elementwise epilogue (a bias per weight and column, a residual).

Library models write their projections as einsums over stacked weights: Gemma's GeGLU gating
(`BTD,2DF->BT2F`, one weight holding gate and up) and recurrentgemma's MLP (`2DF,BTD->2FBT`, then a
transpose and a bias per weight). The dot then has a 3-D right operand, or the weight on its left, and
no 2-D matmul template takes it; the row-tiled fallback held the whole weight in VMEM (Gemma 2 at full:
two buffers of a 32 MiB weight, VMEM exhausted) or the whole problem in one step (Griffin: a compile
past the 300 s timeout). Here the grid is (weight g, row blocks, column blocks, k-steps): no operand is
held whole, each output block is written once, and the layout is read through index maps (the free
reshapes aside, nothing is copied in HBM). Anything else returns None.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.row_blocks import itemsize
from maxkernel.tpu_tools.problem.emit import (
    ELEMENTWISE,
    Program,
    body_lines,
    dot_kind,
    dot_time_factor,
    mxu_dot_note,
    mxu_dot_source,
    operand,
)

SOURCE = '''"""Stacked-weight matmul (offline template `stacked_matmul`), generated from the reference's traced program.

out[m, g, n] = epilogue(sum_k x[m, k] w[g, k, n]) with x's leading axes merged into M and the output laid
out ${layout_note}. Grid (g, row blocks, column blocks, k-steps), k innermost and "arbitrary": an f32
accumulator is zeroed on the first k-step; on the last it is rounded to the dot's dtype (as the reference
rounds), the reference's own epilogue runs on it and the output block is written to HBM once. The dot
runs as XLA runs the reference's on a TPU (`_mxu_dot`: ${dot_note}).

Shape-generic: every shape is read from the inputs when the kernel is traced; the blocks were chosen
for the target size (${target}) and clamp to smaller inputs. A last row or column block past the edge
is partial (rows and columns are independent; the store drops the rest); a last k-step past K is
masked to zeros on both operands, so it adds nothing.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}
BLOCK_COLS = ${block_cols}
BLOCK_K = ${block_k}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
W_NK = ${w_nk}  # the weight is [G, N, K] (else [G, K, N])
G_FIRST = ${g_first}  # the output is [G, M..., N] (else [M..., G, N])


${mxu_dot}

def _epilogue(${epi_args}):
    """The reference's equations after its dot, on one [rows, columns] block of the output."""
${body}
    return ${out}


def _kernel(x_ref, w_ref, ${other_refs}o_ref, acc_ref, *, k_total):
    k = pl.program_id(3)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]  # [bm, bk]
    w = w_ref[...]  # [bn, bk] if W_NK else [bk, bn]
    bk = x.shape[1]
    if k_total % bk:  # the last k-step runs past K: zero both operands there (garbage * 0 may be NaN)
        left = k_total - k * bk
        x = jnp.where(lax.broadcasted_iota(jnp.int32, x.shape, 1) < left, x, jnp.zeros_like(x))
        w = jnp.where(lax.broadcasted_iota(jnp.int32, w.shape, 1 if W_NK else 0) < left, w, jnp.zeros_like(w))
    dims = (((1,), (1,)), ((), ())) if W_NK else (((1,), (0,)), ((), ()))
    acc_ref[...] += _mxu_dot(x, w, dims)

    @pl.when(k == pl.num_programs(3) - 1)
    def _store():
        dot = acc_ref[...].astype(jnp.${dot_dtype})
        o_ref[...] = _epilogue(dot${other_loads}).astype(o_ref.dtype)


def _view(a, lead_rank, g_axis):
    """An epilogue input of the output's rank as the kernel's view of it: [G, M, N] (G_FIRST) or
    [M, G * N], where its G, M and N are each 1 or the output's (checked when the kernel was written)."""
    lead = a.shape[1 : 1 + lead_rank] if G_FIRST else a.shape[:lead_rank]
    m = 1
    for d in lead:
        m *= d
    g = 1 if g_axis is None else a.shape[g_axis]
    return a.reshape((g, m, a.shape[-1]) if G_FIRST else (m, g * a.shape[-1]))


def workload(${args}):
    lead = ${x}.shape[:-1]  # the activation's leading axes, merged into M
    x = ${x}.reshape(-1, ${x}.shape[-1])  # [M, K]
    w = ${w_view}  # [G, K, N] or [G, N, K]
    m, k_total = x.shape
    g = w.shape[0]
    n = w.shape[1] if W_NK else w.shape[2]
    bm, bn, bk = min(BLOCK_ROWS, m), min(BLOCK_COLS, n), min(BLOCK_K, k_total)
    if not G_FIRST and g > 1:  # [M, G * N]: a column block must not straddle two weights
        while n % bn and bn % 256 == 0:
            bn //= 2
        if n % bn:
            raise ValueError(f"N={n}: no column block of 128 lanes or more divides it (the [M, G*N] view needs one)")
    cols = pl.cdiv(n, bn)
    sq = pl.Squeezed()

    # x is [M, K]: the [bm, bk] tile of row block i at k-step kk, the same for every weight
    def x_map(gg, i, j, kk):
        return i, kk

    # w is [G, K, N] (or [G, N, K]): weight gg's tile of column block j at k-step kk
    def w_map(gg, i, j, kk):
        return (gg, j, kk) if W_NK else (gg, kk, j)

    # the output is [G, M, N] (block (gg, i, j)) or [M, G * N] (weight gg's column block j)
    def o_map(gg, i, j, kk):
        return (gg, i, j) if G_FIRST else (i, gg * cols + j)

    others = [${other_views}]
    other_specs = []
    for v in others:  # an axis of size 1 (a bias along N, one for every row) is read at block 0
        md = v.shape[1] if G_FIRST else v.shape[0]
        gd, nd = (v.shape[0], v.shape[2]) if G_FIRST else (v.shape[1] // n, n if v.shape[1] > 1 else 1)

        def v_map(gg, i, j, kk, gd=gd, md=md, nd=nd):
            gi, mi, ni = (gg if gd > 1 else 0), (i if md > 1 else 0), (j if nd > 1 else 0)
            return (gi, mi, ni) if G_FIRST else (mi, gi * cols + ni)

        mb, nb = (bm if md > 1 else 1), (bn if nd > 1 else 1)
        other_specs.append(pl.BlockSpec((sq, mb, nb) if G_FIRST else (mb, nb), v_map))
    out = pl.pallas_call(
        functools.partial(_kernel, k_total=k_total),
        out_shape=jax.ShapeDtypeStruct((g, m, n) if G_FIRST else (m, g * n), jnp.${out_dtype}),
        grid=(g, pl.cdiv(m, bm), cols, pl.cdiv(k_total, bk)),
        in_specs=[
            pl.BlockSpec((bm, bk), x_map),
            pl.BlockSpec((sq, bn, bk) if W_NK else (sq, bk, bn), w_map),
            *other_specs,
        ],
        out_specs=pl.BlockSpec((sq, bm, bn) if G_FIRST else (bm, bn), o_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        interpret=False,
        name="offline_stacked_matmul",
    )(x, w, *others)
    return out.reshape(${out_shape})
'''

BLOCKS = (128, 256, 512, 1024, 2048)
# The first proposal's VMEM count (an upper bound: two buffers of every block, the f32 accumulator and
# epilogue temporaries) stays under this, below every chip's kernel limit (48 MiB or more).
_FIRST_VMEM = 40 * MiB


def _dims(e: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def recognise(program: Program) -> dict[str, Any] | None:
    """The roles of a stacked-weight projection program (x, w, layout, epilogue), or None."""
    eqns, names = program["equations"], program["input_names"]
    shape = {n: list(s["shape"]) for n, s in zip(names, program["inputs"], strict=True)}
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general"]
    if len(dots) != 1 or len(program["outputs"]) != 1 or program["outputs"][0] in names:
        return None
    d = dots[0]
    e = eqns[d]
    lhs, rhs = e["inputs"]
    lc, rc, lb, rb = _dims(e)
    if lb or rb or len(lc) != 1 or lhs not in names or rhs not in names or lhs == rhs:
        return None
    # x: the operand contracted on its last axis; w: [G?, K, N] or [G?, N, K]. Prefer x on the left.
    roles = None
    for x, xc, w, wc, x_first in ((lhs, lc[0], rhs, rc[0], True), (rhs, rc[0], lhs, lc[0], False)):
        xr, wr = len(shape[x]), len(shape[w])
        if xr >= 2 and xc == xr - 1 and wr in (2, 3) and wc in (wr - 2, wr - 1):
            roles = (x, w, x_first, wc == wr - 1)
            break
    if roles is None:
        return None
    x, w, x_first, w_nk = roles
    if any(n in t["inputs"] for i, t in enumerate(eqns) if i != d for n in (x, w)):
        return None  # x or w is read by the epilogue as well: the kernel sees them only as tiles
    if program["inputs"][names.index(x)]["dtype"] != program["inputs"][names.index(w)]["dtype"]:
        return None
    n_lead, has_g = len(shape[x]) - 1, len(shape[w]) == 3
    # the dot's axes by role: lhs free axes then rhs free axes
    w_free = (["g"] if has_g else []) + ["n"]
    labels = (
        [f"m{a}" for a in range(n_lead)] + w_free if x_first else w_free + [f"m{a}" for a in range(n_lead)]
    )
    cur, epilogue = e["outputs"][0], []
    out_shape = program["out_specs"][0]["shape"]
    widened: dict[str, tuple[str, tuple[int, ...]]] = {}  # an input broadcast to the output's shape
    for i, t in enumerate(eqns):
        if i == d:
            continue
        prim, ins = t["primitive"], t["inputs"]
        if prim == "transpose" and ins == [cur] and not epilogue:
            perm = ast.literal_eval(str(t["params"]["permutation"]))
            labels = [labels[p] for p in perm]
            cur = t["outputs"][0]
            continue
        b_shape = t["out_specs"][0]["shape"] if t["out_specs"] else []
        if (
            prim == "broadcast_in_dim"
            and ins[0] in names
            and len(b_shape) == len(out_shape)
            and all(a in (1, o) for a, o in zip(b_shape, out_shape, strict=True))
        ):
            dims = tuple(ast.literal_eval(str(t["params"]["broadcast_dimensions"])))
            widened[t["outputs"][0]] = (ins[0], dims)  # read as a reshape of the input: 1 on every new axis
            continue
        if prim not in ELEMENTWISE or len(t["outputs"]) != 1 or prim == "iota":
            return None
        epilogue.append(i)
    lead = [f"m{a}" for a in range(n_lead)]
    if labels == lead + w_free:
        g_first = False
    elif has_g and labels == ["g", *lead, "n"]:
        g_first = True
    elif not has_g and labels == lead + ["n"]:
        g_first = False
    else:
        return None  # a layout the index maps cannot read (N not last, the row axes split)
    out_rank = len(labels)
    # every epilogue value is the dot's (after the layout) or an input of the output's rank (or widened to
    # it) whose axes are 1 or the output's, with the row axes all 1 or all the output's (checked in build)
    dot_side = {cur}
    others: list[dict[str, Any]] = []
    for i in epilogue:
        t = eqns[i]
        for a in t["inputs"]:
            if a.startswith("lit:") or a in dot_side or any(o["var"] == a for o in others):
                continue
            if a in widened:
                others.append({"var": a, "input": widened[a][0], "dims": widened[a][1]})
            elif a in names and len(shape[a]) == out_rank:
                others.append({"var": a, "input": a, "dims": None})
            else:
                return None
        dot_side.add(t["outputs"][0])
    if program["outputs"][0] not in dot_side:
        return None
    return {
        "x": x, "w": w, "w_nk": w_nk, "has_g": has_g, "g_first": g_first, "labels": labels,
        "dot": d, "dot_out": cur, "epilogue": epilogue, "others": others,
    }  # fmt: skip


def _widened(o: Mapping[str, Any], shape: list[int], rank: int) -> list[int]:
    """An epilogue input's shape as the output's rank sees it (a broadcast's new axes are 1)."""
    if o["dims"] is None:
        return list(shape)
    return [shape[o["dims"].index(k)] if k in o["dims"] else 1 for k in range(rank)]


def _broadcast_ok(r: Mapping[str, Any], out_shape: list[int], in_shape: list[int]) -> bool:
    """An epilogue input's axes are 1 or the output's, its row axes all 1 or all the output's."""
    if len(in_shape) != len(out_shape) or any(
        a not in (1, b) for a, b in zip(in_shape, out_shape, strict=True)
    ):
        return False
    rows = [k for k, lab in enumerate(r["labels"]) if lab.startswith("m")]
    row_dims = [in_shape[k] for k in rows]
    if r["has_g"] and not r["g_first"] and in_shape[r["labels"].index("g")] > 1 and in_shape[-1] == 1:
        return False  # one value per weight, none per column: the [M, G*N] view has no block for it
    return all(x == 1 for x in row_dims) or row_dims == [out_shape[k] for k in rows]


def _widen_source(o: Mapping[str, Any], rank: int) -> str:
    """The source of an epilogue input as the output's rank sees it (a reshape: free in XLA)."""
    if o["dims"] is None:
        return o["input"]
    dims = [f"{o['input']}.shape[{o['dims'].index(k)}]" if k in o["dims"] else "1" for k in range(rank)]
    return f"{o['input']}.reshape(({', '.join(dims)},))"


def build(program: Program, sym: Symbolic) -> Template | None:
    """The (g, rows, columns, k)-tiled template of a stacked-weight projection, or None."""
    r = recognise(program)
    if r is None:
        return None
    eqns, names = program["equations"], program["input_names"]
    sizes = [sym.at(s) for s in sym.sizes]
    for at in sizes:  # every traced size: the epilogue inputs broadcast as the kernel's views read them
        ins = dict(zip(names, (s["shape"] for s in at["inputs"]), strict=True))
        out_s = at["out_specs"][0]["shape"]
        if not all(_broadcast_ok(r, out_s, _widened(o, ins[o["input"]], len(out_s))) for o in r["others"]):
            return None
        w_shape = ins[r["w"]]
        if (
            r["has_g"]
            and not r["g_first"]
            and w_shape[0] > 1
            and (w_shape[-2] if r["w_nk"] else w_shape[-1]) % 128
        ):
            return None  # [M, G*N] with N off the lanes: a column block would straddle two weights
    epi_eqns = [eqns[i] for i in r["epilogue"]]
    body = body_lines({**program, "equations": epi_eqns}, None, None, sym)
    if sym.unsolved:
        return None
    labels = r["labels"]
    g_axis = labels.index("g") if r["has_g"] else None
    at = sym.at(sym.target)
    tshape = {n: s["shape"] for n, s in zip(names, at["inputs"], strict=True)}
    xs, ws = tshape[r["x"]], tshape[r["w"]]
    m_t, k_t = math.prod(xs[:-1]), xs[-1]
    g_t = ws[0] if r["has_g"] else 1
    n_t = ws[-2] if r["w_nk"] else ws[-1]
    item = itemsize(at["inputs"][names.index(r["x"])]["dtype"])
    out_item = itemsize(program["out_specs"][0]["dtype"])
    out_t = at["out_specs"][0]["shape"]
    row_axes = [k for k, lab in enumerate(labels) if lab.startswith("m")]
    other_blocks = [  # (has the rows, has the columns) per epilogue input, at the target
        (any(v[k] > 1 for k in row_axes), v[-1] > 1 and out_t[-1] > 1)
        for v in (_widened(o, tshape[o["input"]], len(out_t)) for o in r["others"])
    ]
    x, w = r["x"], r["w"]
    n_lead = len(xs) - 1
    lead_src = "lead"
    if r["g_first"]:
        out_shape = f"(g,) + {lead_src} + (n,)"
    else:
        out_shape = f"{lead_src} + (g, n)" if r["has_g"] else f"{lead_src} + (n,)"
    kind = dot_kind(program, eqns[r["dot"]])
    fixed = {
        "mxu_dot": mxu_dot_source(kind),
        "dot_note": mxu_dot_note(kind),
        "layout_note": "[G, M..., N] (the reference's transpose read through the index maps)"
        if r["g_first"]
        else "[M..., G, N] (viewed as [M, G*N]: weight g's columns are a run of column blocks)"
        if r["has_g"]
        else "[M..., N]",
        "target": f"{sym.target}: G={g_t}, M={m_t}, K={k_t}, N={n_t}",
        "w_nk": str(r["w_nk"]),
        "g_first": str(r["g_first"]),
        "epi_args": ", ".join([r["dot_out"], *(o["var"] for o in r["others"])]),
        "body": "\n".join(f"    {ln}" for ln in body) or "    pass",
        "out": operand(program["outputs"][0]),
        "other_refs": "".join(f"{o['var']}_ref, " for o in r["others"]),
        "other_loads": "".join(f", {o['var']}_ref[...]" for o in r["others"]),
        "dot_dtype": eqns[r["dot"]]["out_specs"][0]["dtype"],
        "args": ", ".join(names),
        "x": x,
        "w_view": w if r["has_g"] else f"{w}[None]",
        "other_views": ", ".join(
            f"_view({_widen_source(o, len(labels))}, {n_lead}, {g_axis})" for o in r["others"]
        ),
        "out_dtype": program["out_specs"][0]["dtype"],
        "out_shape": out_shape,
    }

    def blocks(c: Mapping[str, Any]) -> tuple[int, int, int]:
        return (
            min(int(c["block_rows"]), m_t),
            min(int(c["block_cols"]), n_t),
            min(int(c["block_k"]), k_t),
        )

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bm, bn, bk = blocks(c)
        operands = 2 * item * (bm * bk + bk * bn)
        out = 2 * out_item * bm * bn
        # each epilogue input's block (rows and columns where it has them), padded to (8, 128) f32 tiles
        other = sum(2 * 4 * max(8, bm if mr else 1) * max(128, bn if nc else 1) for mr, nc in other_blocks)
        split = 2 * (bm * bk + bk * bn) * {"bf16_1x": 1, "bf16_3x": 2}.get(kind, 0)  # bf16 copies
        return int(
            operands + out + 4 * bm * bn + 2 * 4 * bm * bn + other + split
        )  # + acc, epilogue temporaries

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        """A rough v6e-like model (0.35 us/step, 1.6 TB/s, 900 TFLOP/s bf16, the dot's passes at its precision,
        an f32 pass 2.5x a bf16 one): it only orders proposals. On a chip this fast an f32 projection is memory-bound unless the
        weight is read once, so fewer row blocks win (the static estimate is the verdict)."""
        bm, bn, bk = blocks(c)
        rows, cols, ks = -(-m_t // bm), -(-n_t // bn), -(-k_t // bk)
        steps = g_t * rows * cols * ks
        # x is read once per (g, column block) unless one block holds all of it; w once per row block
        x_reads = 1 if (bm, bk) == (m_t, k_t) else g_t * cols
        hbm = item * (x_reads * m_t * k_t + rows * g_t * k_t * n_t) + out_item * g_t * m_t * n_t
        feed = min(bm, 256) / 256 * min(bn, 256) / 256
        compute = 2 * g_t * m_t * n_t * k_t / (900e12 * feed) * 1e6 * dot_time_factor(kind)
        penalty = 1e6 if vmem(c, d) > 48 * MiB else 0.0
        return max(compute, hbm / 1.6e12 * 1e6) + 0.35 * steps + penalty

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        return [
            f"{k}={c[k]} is not one of {list(BLOCKS)}"
            for k in ("block_rows", "block_cols", "block_k")
            if c[k] not in BLOCKS
        ]

    configs = [
        {"block_rows": a, "block_cols": b, "block_k": k} for a in BLOCKS for b in BLOCKS for k in BLOCKS
    ]
    fitting = [c for c in configs if vmem(c, {}) <= _FIRST_VMEM] or configs[:1]
    # the cheapest; among equals the fewest steps, then the deepest k-step (fewer accumulator passes)
    first = min(fitting, key=lambda c: (round(cost(c, {}), 1), -math.prod(blocks(c))))
    return Template(
        name="stacked_matmul",
        operators=("program",),
        source=SOURCE,
        tunables={"block_rows": BLOCKS, "block_cols": BLOCKS, "block_k": BLOCKS},
        dims_of=lambda sizes: {"G": g_t, "M": m_t, "K": k_t, "N": n_t},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=first,
        fixed=lambda op: fixed,
        constraints=(
            f"block_rows, block_cols, block_k in {list(BLOCKS)} (clamped to M={m_t}, N={n_t}, K={k_t}; "
            "a K tail is masked)",
        ),
        grid_axes=lambda c: ["g", "rows", "cols", "k"],
        semantics=lambda c: ["parallel", "parallel", "parallel", "arbitrary"],
    )
