"""A gated MLP from a traced program: up-projections, an elementwise chain, a down-projection, tiled
over the hidden axis so no step holds a whole weight.

The row-tiled `matmul` class keeps every weight whole in VMEM, which cannot hold a production MLP
(8192 x 28672 per weight). This serves a program whose dot_generals are: one or more up-projections
of the same row input x ([..., E] @ [E, H]), elementwise ops only (SwiGLU's silu and product) that
combine them into h [..., H], and one down-projection h @ [H, E'] that is the output. The grid is
(row blocks, hidden blocks), hidden innermost and "arbitrary": each step computes its [rows, bh] slice
of h with the reference's own ops and adds h_slice @ W_down[slice] to an f32 accumulator; the output
block is written on the last hidden step. After the down-projection an elementwise epilogue may follow
(a transformer block's residual add): its operands are the down-projection, literals, and inputs of the
output's shape, tiled by rows like the output, and it runs once per row block on the finished sum.
Anything else returns None.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.tile_cost import branch_us, flops_us
from maxkernel.tpu_tools.problem.emit import (
    ELEMENTWISE,
    Program,
    body_lines,
    dot_kind,
    mxu_dot_note,
    mxu_dots,
)

SOURCE = '''"""Gated MLP (offline template `mlp_chain`), generated from the reference's traced program.

Grid (row blocks, hidden blocks), hidden innermost and "arbitrary": each step computes its slice of
the hidden activation with the reference's own elementwise ops (each up-projection accumulated in
f32 and rounded to the reference's dtype, as it rounds) and adds slice @ W_down[slice] to an f32
accumulator; the output block is stored once, on the last hidden step, through the reference's own
equations after the down-projection (if any). No weight is held whole. Each dot runs as XLA runs the
reference's on a TPU (`_mxu_dot`: ${dot_note}).

Shape-generic: every shape is read from the inputs when the kernel is traced; the blocks were chosen
for the target size (${target}) and clamp to smaller inputs. A last row block past M is partial (rows
are independent); a last hidden block past H is masked (its h columns and W_down rows are zeroed).
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
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


${mxu_dot}

def _hidden(${x}, ${ups}):
    """The reference's equations from the up-projections to the hidden activation, on one block."""
${chain}
    return ${h}


def _epilogue(${epi_params}):
    """The reference's equations after the down-projection, on one row block's finished sum."""
${epi_chain}
    return ${out}


def _kernel(${in_refs}, o_ref, acc_ref, *, h_total):
    j = pl.program_id(1)
    bh = down_ref.shape[0]

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]
${up_dots}
    h = _hidden(x, ${up_names})
    down = down_ref[...]
    if h_total % bh:  # the last hidden block runs past H: zero its h columns and W_down rows
        left = h_total - j * bh
        h = jnp.where(lax.broadcasted_iota(jnp.int32, h.shape, 1) < left, h, jnp.zeros_like(h))
        down = jnp.where(lax.broadcasted_iota(jnp.int32, down.shape, 0) < left, down, jnp.zeros_like(down))
    acc_ref[...] += ${down_dot}(h, down, (((1,), (0,)), ((), ())))

    @pl.when(j == pl.num_programs(1) - 1)
    def _store():
        ${down_out} = acc_ref[...].astype(jnp.${down_dtype})
        o_ref[...] = _epilogue(${epi_reads}).astype(o_ref.dtype)


def workload(${args}):
    lead = ${x}.shape[:-1]
    rows_x = ${x}.reshape(-1, ${x}.shape[-1])  # [M, E]: the row axes merged
    m, e = rows_x.shape
    h_total, e_out = ${down}.shape
    b0, bh = min(BLOCK_ROWS, m), min(BLOCK_HIDDEN, h_total)

    def x_map(i, j):
        return i, 0

    def up_map(i, j):  # [E, bh]: the hidden block j, all of E
        return 0, j

    def down_map(i, j):  # [bh, E_out]: the hidden block j's rows
        return j, 0

    def o_map(i, j):
        return i, 0

    out = pl.pallas_call(
        functools.partial(_kernel, h_total=h_total),
        out_shape=jax.ShapeDtypeStruct((m, e_out), jnp.${out_dtype}),
        grid=(pl.cdiv(m, b0), pl.cdiv(h_total, bh)),
        in_specs=[pl.BlockSpec((b0, e), x_map), ${up_specs}, pl.BlockSpec((bh, e_out), down_map)${res_specs}],
        out_specs=pl.BlockSpec((b0, e_out), o_map),
        scratch_shapes=[pltpu.VMEM((b0, e_out), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_mlp_chain",
    )(rows_x, ${up_args}, ${down}${res_args})
    return out.reshape(lead + (e_out,))
'''


def _dims(e: dict) -> tuple:
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def recognise(program: Program) -> dict[str, Any] | None:
    """The roles (x, up-projections, hidden chain, down-projection, epilogue) of a gated-MLP program,
    or None.

    Each non-dot equation belongs to the hidden chain (its operands come from the up-projections) or to
    the epilogue (its operands come from the down-projection or from inputs of the output's shape);
    one that mixes the two, or reads anything else, refuses the program: the hidden-tiled kernel would
    compute it on a slice it does not have."""
    eqns, names = program["equations"], program["input_names"]
    shape = {n: s["shape"] for n, s in zip(names, program["inputs"], strict=True)}
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general"]
    if len(dots) < 2 or len(program["outputs"]) != 1:
        return None
    *ups, down = dots
    x = eqns[ups[0]]["inputs"][0]
    if x not in names:
        return None
    rank = len(shape[x])
    for i in ups:
        lhs, rhs = eqns[i]["inputs"]
        if (
            lhs != x
            or rhs not in names
            or len(shape[rhs]) != 2
            or _dims(eqns[i]) != ((rank - 1,), (0,), (), ())
        ):
            return None
    ed = eqns[down]
    h, w = ed["inputs"]
    if w not in names or len(shape[w]) != 2 or _dims(ed) != ((rank - 1,), (0,), (), ()):
        return None
    down_out = ed["outputs"][0]
    out_shape = list(ed["out_specs"][0]["shape"])
    residual_ok = {n for n in names if list(shape[n]) == out_shape and n != w}
    known = {eqns[i]["outputs"][0] for i in ups}
    epi_known = {down_out}
    chain, epilogue, residuals = [], [], []
    for i, e in enumerate(eqns):
        if i in dots:
            continue
        if e["primitive"] not in ELEMENTWISE or len(e["outputs"]) != 1:
            return None
        args = [a for a in e["inputs"] if not a.startswith("lit:")]
        if i < down and all(a in known for a in args):
            known.add(e["outputs"][0])
            chain.append(i)
        elif all(a in epi_known or a in residual_ok for a in args):
            residuals += [a for a in args if a in residual_ok and a not in residuals]
            epi_known.add(e["outputs"][0])
            epilogue.append(i)
        else:
            return None  # mixes the hidden chain with the epilogue, or reads a value outside both
    if h not in known or h == x or program["outputs"][0] not in epi_known:
        return None
    users = [a for i in chain for a in eqns[i]["inputs"]]
    if x in users:
        return None  # x used in the hidden chain as well as by the up-projections
    return {
        "x": x, "ups": ups, "down": down, "chain": chain, "h": h, "w_down": w,
        "epilogue": epilogue, "residuals": residuals, "down_out": down_out,
    }  # fmt: skip


def source_parts(program: Program, sym: Symbolic) -> dict[str, Any] | None:
    """What every gated-MLP template writes from the program (the hidden chain and the epilogue as
    the reference's own lines, the dots at its numerics, the names of the roles) and the target's
    dims, or None when the program is not one or its lines do not follow the size."""
    r = recognise(program)
    if r is None:
        return None
    eqns, names = program["equations"], program["input_names"]
    chain = body_lines({**program, "equations": [eqns[i] for i in r["chain"]]}, None, None, sym)
    if sym.unsolved:
        return None
    epi = body_lines({**program, "equations": [eqns[i] for i in r["epilogue"]]}, None, None, sym)
    if sym.unsolved:
        return None
    res = r["residuals"]
    up_outs = [eqns[i]["outputs"][0] for i in r["ups"]]
    up_w = [eqns[i]["inputs"][1] for i in r["ups"]]
    kinds = [dot_kind(program, eqns[i]) for i in [*r["ups"], r["down"]]]
    dot_defs, dot_fns = mxu_dots(kinds)
    at = sym.at(sym.target)
    tshape = {n: s["shape"] for n, s in zip(names, at["inputs"], strict=True)}
    h_t, eo_t = tshape[r["w_down"]]
    fixed = {
        "mxu_dot": dot_defs,
        "down_dot": dot_fns[-1],
        "dot_note": "; ".join(dict.fromkeys(mxu_dot_note(k) for k in kinds)),
        "x": r["x"],
        "ups": ", ".join(up_outs),
        "chain": "\n".join(f"    {ln}" for ln in chain) or "    pass",
        "h": r["h"],
        "up_names": ", ".join(up_outs),
        "args": ", ".join(names),
        "down": r["w_down"],
        "out_dtype": program["out_specs"][0]["dtype"],
        "up_args": ", ".join(up_w),
        "epi_params": ", ".join([r["down_out"], *res]),
        "epi_chain": "\n".join(f"    {ln}" for ln in epi) or "    pass",
        "out": program["outputs"][0],
        "down_out": r["down_out"],
        "down_dtype": eqns[r["down"]]["out_specs"][0]["dtype"],
    }
    return {
        "roles": r,
        "fixed": fixed,
        "kinds": kinds,
        "dot_fns": dot_fns,
        "up_w": up_w,
        "up_outs": up_outs,
        "m": math.prod(tshape[r["x"]][:-1]),
        "e": tshape[r["x"]][-1],
        "h": h_t,
        "e_out": eo_t,
        "item": 2 if "16" in at["inputs"][names.index(r["x"])]["dtype"] else 4,
    }


def build(program: Program, sym: Symbolic) -> Template | None:
    """The hidden-tiled template of a gated-MLP program, or None (the caller keeps its own)."""
    p = source_parts(program, sym)
    if p is None:
        return None
    r, eqns = p["roles"], program["equations"]
    res, up_w = r["residuals"], p["up_w"]
    up_dots = "\n".join(
        f"    {o} = {fn}(x, {w}_ref[...], (((1,), (0,)), ((), ()))).astype(jnp.{eqns[i]['out_specs'][0]['dtype']})"
        for o, w, i, fn in zip(p["up_outs"], up_w, r["ups"], p["dot_fns"], strict=False)
    )
    m_t, e_t, h_t, eo_t, item = p["m"], p["e"], p["h"], p["e_out"], p["item"]
    n_up, n_res = len(up_w), len(res)
    fixed = {
        **p["fixed"],
        "up_refs": ", ".join(f"{w}_ref" for w in up_w),
        "up_dots": up_dots,
        "up_specs": ", ".join("pl.BlockSpec((e, bh), up_map)" for _ in up_w),
        "in_refs": ", ".join(["x_ref", *(f"{w}_ref" for w in up_w), "down_ref", *(f"{n}_ref" for n in res)]),
        "epi_reads": ", ".join([r["down_out"], *(f"{n}_ref[...]" for n in res)]),
        "res_specs": "".join(", pl.BlockSpec((b0, e_out), o_map)" for _ in res),
        "res_args": "".join(f", {n}.reshape(-1, e_out)" for n in res),
        "target": f"{sym.target}: M={m_t}, E={e_t}, H={h_t}, E_out={eo_t}",
    }
    rows = (8, 16, 32, 64, 128, 256, 512) if item == 4 else (16, 32, 64, 128, 256, 512)
    hidden = (128, 256, 512, 1024)

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        b0, bh = min(int(c["block_rows"]), m_t), min(int(c["block_hidden"]), h_t)
        blocks = b0 * e_t + n_up * e_t * bh + bh * eo_t + (1 + n_res) * b0 * eo_t
        return int(2 * item * blocks + 4 * b0 * eo_t + 4 * 4 * b0 * bh * (n_up + 1))

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        out = []
        if int(c["block_rows"]) not in rows:
            out.append(f"block_rows={c['block_rows']} is not one of {list(rows)}")
        if int(c["block_hidden"]) not in hidden:
            out.append(f"block_hidden={c['block_hidden']} is not one of {list(hidden)}")
        return out

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        b0, bh = min(int(c["block_rows"]), m_t), min(int(c["block_hidden"]), h_t)
        row_steps = -(-m_t // b0)
        steps = row_steps * -(-h_t // bh)
        hbm = item * (m_t * e_t + row_steps * (n_up * e_t * h_t + h_t * eo_t) + (1 + n_res) * m_t * eo_t)
        # the up-projections' tiles are [b0, bh], the down-projection's [b0, E_out]
        compute = sum(flops_us(m_t, e_t, h_t, b0, bh, k) for k in p["kinds"][:-1])
        compute += flops_us(m_t, h_t, eo_t, b0, eo_t, p["kinds"][-1])
        # the hidden chain runs beside the dots; the store (a cast, the epilogue) in a branch of its own
        store = branch_us(m_t * eo_t, len(r["epilogue"]) + 2)
        penalty = 1e6 if vmem(c, d) > 48 * MiB else 0.0
        return max(compute, hbm / 1.6e12 * 1e6) + store + 0.35 * steps + penalty

    fits = [
        (b0, bh)
        for b0 in rows
        for bh in hidden
        if vmem({"block_rows": b0, "block_hidden": bh}, {}) <= 40 * MiB
    ]
    b00, bh0 = max(fits, key=lambda t: (t[0] * t[1], t[0])) if fits else (min(rows), min(hidden))
    return Template(
        name="mlp_chain",
        operators=("program",),
        source=SOURCE,
        tunables={"block_rows": rows, "block_hidden": hidden},
        dims_of=lambda sizes: {"M": m_t, "E": e_t, "H": h_t},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial={"block_rows": b00, "block_hidden": bh0},
        fixed=lambda op: fixed,
        constraints=(
            f"block_rows in {list(rows)}",
            f"block_hidden in {list(hidden)} (a last block past H is masked)",
        ),
        grid_axes=lambda c: ["rows", "hidden"],
        semantics=lambda c: ["parallel", "arbitrary"],
    )
