"""Templates built from a reference's traced program: its equations re-emitted inside one pallas_call.

The class of the program (clients/offline/classify.py) names the template and says what it is: a
matmul with its epilogue fused, a row-wise reduction, attention, elementwise, or another fused
program. In every class the kernel body is the reference's own equation list, so its numerics follow
the reference's structure instead of a per-task table. When the rows of the output are separable
(clients/offline/rows.py) the grid tiles them, `BLOCK_ROWS` rows per step, inputs that carry rows are
blocked with them and the others (weights, bias, scales) stay whole in VMEM; otherwise one grid step
holds the whole problem (fine at small sizes, too big for VMEM at production sizes).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.rows import RowPlan
from maxkernel.clients.offline.templates import MiB, Template
from maxkernel.tpu_tools.problem.emit import Program, body_lines, operand

SOURCE = '''"""${title} (offline template `${name}`), generated from the reference's traced program.

${about}
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}
ROWS = ${rows}  # the output's leading axis${tiling_note}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _program(${args}, row0):
    """The reference's equations on one block (row0: the block's first row)."""
${body}
    return ${outs}


def _kernel(${refs}):
    outs = _program(${loads}, pl.program_id(0) * BLOCK_ROWS)
${stores}


def workload(${args}):
    if ROWS % BLOCK_ROWS:
        raise ValueError(f"rows={ROWS} should be divisible by BLOCK_ROWS={BLOCK_ROWS}")
${maps}
    out = pl.pallas_call(
        _kernel,
        out_shape=[${out_shapes}],
        grid=(ROWS // BLOCK_ROWS,),
        in_specs=[${in_specs}],
        out_specs=[${out_specs}],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel",), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_${name}",
    )(${args})
    return ${result}
'''

ABOUT = {
    "matmul": "dot_general with its epilogue fused: each grid step multiplies a block of rows by the whole\n"
    "right-hand operand (kept in VMEM) and runs the reference's epilogue on the result before one store.",
    "rowwise": "A reduction over the last axis with its elementwise ops: each grid step loads a block of whole\n"
    "rows, reduces and normalises them as the reference does, and stores them once.",
    "attention": "The attention pattern (dot -> softmax -> dot): each grid step holds a block of the leading\n"
    "axis with its whole score matrix in VMEM (an exact softmax, not an online one).",
    "elementwise": "Elementwise ops only: each grid step maps a block of rows through the reference's ops.",
    "fused": "The reference's program (convolutions, norms, reductions) fused into one kernel body.",
}
TITLE = {
    "matmul": "Matmul with a fused epilogue",
    "rowwise": "Row-wise reduction",
    "attention": "Attention",
    "elementwise": "Elementwise map",
    "fused": "Fused program",
}
_ALIGN = {4: 8, 2: 16, 1: 32}  # sublane multiple of a block's second-to-last dim, by itemsize


def _itemsize(dtype: str) -> int:
    import numpy as np

    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return 2 if "16" in dtype else 4


def _nbytes(shape: list[int], dtype: str) -> int:
    return math.prod(shape) * _itemsize(dtype)


def _row_shape(shape: list[int], axis: int | None) -> str:
    dims = ["BLOCK_ROWS" if i == axis else str(d) for i, d in enumerate(shape)]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def row_body(program: Program, plan: RowPlan, equations: list[dict] | None = None) -> str:
    """The program's equations (or the subset `equations`) as indented source, shapes along rows tiled."""
    axes = plan.axes
    eqns = program["equations"]

    def shape_of(e: dict, key: str) -> str:
        out_ax = axes.get(e["outputs"][0]) if plan.tiled else None
        if out_ax is None:
            return e["params"][key]
        if e["primitive"] == "slice":
            limit = list(ast.literal_eval(e["params"]["limit_indices"]))
            return _row_shape(limit, out_ax)
        return _row_shape(list(ast.literal_eval(e["params"][key])), out_ax)

    offsets = {id(eqns[i]) for i in plan.offset_iotas} if plan.tiled else set()

    def extra(e: dict, expr: str) -> str:
        if id(e) in offsets:
            dtype = e["params"]["dtype"]
            return f"lax.add({expr}, lax.convert_element_type(row0, {dtype}))"
        return expr

    sub = program if equations is None else {**program, "equations": equations}
    return "\n".join(f"    {line}" for line in body_lines(sub, shape_of, extra))


def _source_parts(program: Program, plan: RowPlan) -> dict[str, str]:
    names = program["input_names"]
    ins = program["inputs"]
    if any(not s["shape"] for s in ins):
        raise ValueError("a rank-0 input (a scalar array) has no block form here")
    body = row_body(program, plan)
    outs = [operand(o) for o in program["outputs"]]
    n_out = len(outs)
    refs = [f"{n}_ref" for n in names] + [f"o{i}_ref" for i in range(n_out)]
    loads = ", ".join(f"{n}_ref[...]" for n in names)
    out_ranks = [len(s["shape"]) for s in program["out_specs"]]
    stores = "\n".join(
        f"    o{i}_ref[...] = outs[{i}].astype(o{i}_ref.dtype)"
        + (".reshape(1, 1)  # a scalar output travels as a (1, 1) block" if not r else "")
        for i, r in enumerate(out_ranks)
    )
    maps, in_specs = [], []
    for n, s, ax in zip(names, ins, plan.input_axes, strict=True):
        rank = len(s["shape"])
        tiled = plan.tiled and ax is not None
        idx = ", ".join(["i" if (tiled and d == 0) else "0" for d in range(rank)]) + (
            "," if rank == 1 else ""
        )
        what = "row block i" if tiled else "the whole array, fetched once"
        maps.append(f"    # {n} is {tuple(s['shape'])}: {what}\n    def {n}_map(i):\n        return {idx}\n")
        block = _row_shape(s["shape"], 0 if tiled else None)
        in_specs.append(f"pl.BlockSpec({block}, {n}_map)")
    out_specs, out_shapes = [], []
    for i, s in enumerate(program["out_specs"]):
        if not s["shape"]:
            maps.append(
                f"    # output {i} is a scalar, stored as (1, 1)\n    def o{i}_map(i):\n        return 0, 0\n"
            )
            out_specs.append(f"pl.BlockSpec((1, 1), o{i}_map)")
            out_shapes.append(f"jax.ShapeDtypeStruct((1, 1), jnp.{s['dtype']})")
            continue
        rank = len(s["shape"])
        idx = ", ".join(["i" if (plan.tiled and d == 0) else "0" for d in range(rank)]) + (
            "," if rank == 1 else ""
        )
        maps.append(f"    # output {i} is {tuple(s['shape'])}\n    def o{i}_map(i):\n        return {idx}\n")
        out_specs.append(f"pl.BlockSpec({_row_shape(s['shape'], 0 if plan.tiled else None)}, o{i}_map)")
        out_shapes.append(f"jax.ShapeDtypeStruct({tuple(s['shape'])}, jnp.{s['dtype']})")
    return {
        "args": ", ".join(names),
        "body": body,
        "outs": "(" + ", ".join(outs) + ("," if n_out == 1 else "") + ")",
        "refs": ", ".join(refs),
        "loads": loads,
        "stores": stores,
        "maps": "\n".join(maps).rstrip("\n"),
        "in_specs": ", ".join(in_specs),
        "out_specs": ", ".join(out_specs),
        "out_shapes": ", ".join(out_shapes),
        "result": _result(out_ranks),
        "rows": str(plan.rows),
        "tiling_note": (
            ", tiled by BLOCK_ROWS; row-carrying inputs are blocked with it, the rest stay whole"
            if plan.tiled
            else f"; not tiled: {plan.why or 'rows are not separable'} (one block holds everything)"
        ),
    }


def _result(ranks: list[int]) -> str:
    items = [f"out[{i}]" + ("" if r else ".reshape(())") for i, r in enumerate(ranks)]
    return items[0] if len(items) == 1 else "(" + ", ".join(items) + ")"


def _legal_blocks(program: Program, plan: RowPlan) -> tuple[int, ...]:
    rows = plan.rows
    if not plan.tiled:
        return (rows,)
    blocked = [s for s, ax in zip(program["inputs"], plan.input_axes, strict=True) if ax is not None]
    blocked += list(program["out_specs"])
    out = []
    cands = sorted({*(1 << k for k in range(rows.bit_length())), rows})
    for b in cands:
        if rows % b:
            continue
        ok = True
        for s in blocked:
            rank = len(s["shape"])
            align = 128 if rank == 1 else _ALIGN.get(_itemsize(s["dtype"]), 8) if rank == 2 else 1
            if b != rows and b % align:
                ok = False
        if ok:
            out.append(b)
    return tuple(out)


def _vmem_fn(program: Program, plan: RowPlan):
    tiled_in = [
        (s, plan.tiled and ax is not None) for s, ax in zip(program["inputs"], plan.input_axes, strict=True)
    ]
    biggest = max(
        [_nbytes(s["shape"], "float32") for e in program["equations"] for s in e["out_specs"]] or [0]
    )

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        frac = int(c["block_rows"]) / max(plan.rows, 1)
        total = 0.0
        for s, t in tiled_in:
            total += 2 * _nbytes(s["shape"], s["dtype"]) * (frac if t else 1.0)
        for s in program["out_specs"]:
            total += 2 * _nbytes(s["shape"], s["dtype"]) * (frac if plan.tiled else 1.0)
        total += 3 * biggest * (frac if plan.tiled else 1.0)
        return int(total)

    return vmem


def build(program: Program, plan: RowPlan, kind: str) -> Template:
    """The template of `program` in class `kind`: a k-tiled matmul when its dot allows, else the fused
    program with one tunable, `block_rows`, over the legal row blocks."""
    blocks = _legal_blocks(program, plan)
    if kind == "matmul":
        from maxkernel.clients.offline.templates import matmul_epilogue

        sp = matmul_epilogue.split(program, plan)
        if sp is not None:
            return matmul_epilogue.build(
                program, plan, sp, blocks, lambda sub: row_body(program, plan, sub["equations"])
            )
    parts = _source_parts(program, plan)
    vmem = _vmem_fn(program, plan)
    hbm = sum(_nbytes(s["shape"], s["dtype"]) for s in program["inputs"] + program["out_specs"])

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        b = int(c["block_rows"])
        return [] if b in blocks else [f"block_rows={b} is not one of the legal row blocks {list(blocks)}"]

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        steps = plan.rows // int(c["block_rows"])
        penalty = 1e6 if vmem(c, d) > 48 * MiB else 0.0
        return hbm / 1.6e12 * 1e6 + 0.35 * steps + penalty

    fitting = [b for b in blocks if vmem({"block_rows": b}, {}) <= 16 * MiB and b <= 256]
    initial = max(fitting) if fitting else min(blocks)
    fixed = {
        **parts,
        "name": kind,
        "title": TITLE[kind],
        "about": ABOUT[kind],
    }
    return Template(
        name=kind,
        operators=("program",),
        source=SOURCE,
        tunables={"block_rows": blocks},
        dims_of=lambda sizes: {"R": plan.rows},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial={"block_rows": initial},
        fixed=lambda op: fixed,
        constraints=(f"block_rows in {list(blocks)} (divides the {plan.rows} rows, (8,128)-aligned blocks)",),
        grid_axes=lambda c: ["rows"],
        semantics=lambda c: ["parallel"],
    )
