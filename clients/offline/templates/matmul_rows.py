"""A matmul whose epilogue reduces over the output's whole row (N), with N tiled like a plain matmul.

Keeping N whole in one block (matmul_epilogue's row epilogue) leaves room for few rows at a production
N (8192): the weight is re-read per row block and the epilogue's [rows, N] temporaries spill. Here the
grid is (row blocks, column blocks, k-steps) with bm x bn x bk blocks, and the epilogue is split where
it first needs a statistic of the whole row:

- the first pass (the Pallas kernel) runs every equation that one output block can finish: elementwise
  ops, per-group statistics whose groups are contiguous column ranges (GroupNorm: bn is a multiple of
  the group size, so no group straddles two blocks), reductions over unit axes (a [M, N, 1, 1] value
  is kept as [M, N]: Mosaic tiles the last two dims, and (1, 1) would pad each element to a vreg);
  each reduction over the whole row is written as one partial per column block, [N blocks, M, 1];
- the second pass combines the partials (max, min, f32 sum) and runs the rest of the reference's own
  equations, traced as they are (XLA fuses them into one memory-bound pass over the values they read).

An epilogue with no whole-row reduction (GroupNorm, InstanceNorm over unit axes) is one pass.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, shape_source
from maxkernel.clients.offline.rows import RowPlan
from maxkernel.clients.offline.templates import scalars
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.batched_matmul import check_ks, k_checkable, k_strict
from maxkernel.clients.offline.templates.matmul_epilogue import ELEMENTWISE, Split, _folded, _k_blocks, split
from maxkernel.clients.offline.templates.row_blocks import itemsize
from maxkernel.clients.offline.templates.tile_cost import accumulator_us, branch_us, flops_us
from maxkernel.tpu_tools.problem.emit import (
    Program,
    body_lines,
    dot_kind,
    mxu_dot_note,
    mxu_dot_source,
    operand,
)

_FIRST_VMEM = 48 * MiB  # blocks, accumulator and epilogue temporaries, as the compiler counts them
COMBINE = {"reduce_max": "jnp.max", "reduce_min": "jnp.min", "reduce_sum": "jnp.sum"}
# what a column past N holds before a partial reduction (it must not change the statistic)
IDENTITY = {"reduce_max": "-jnp.inf", "reduce_min": "jnp.inf", "reduce_sum": "0"}

SOURCE = '''"""Tiled matmul with a whole-row epilogue (offline template `matmul_rows`), generated from the reference's program.

Grid (row blocks, column blocks, k-steps), k innermost and "arbitrary": the f32 accumulator starts as the
first k-step's product (no zero fill); the last k-step adds its product and runs, in the same branch as its
dot (the epilogue's vector work overlaps the MXU's), the part of the reference's epilogue that one output
block can finish on the sum (rounded to the dot's output dtype, as the reference rounds). ${passes} The dot runs as XLA runs the
reference's on a TPU (`_mxu_dot`: ${dot_note}).

Shape-generic: M, K, N and every epilogue shape are read from the inputs when the kernel is traced
(`sh`); the blocks were chosen for the target size (${target}) and clamp to smaller inputs. A last row
block past M is partial (rows are independent; the store drops the rest); a last k-step past K is masked
to zeros on both operands; in a last column block past N the columns past N are set to the reduction's
identity before a partial statistic, and the store drops them.
"""

import functools
import math

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
N_AXES = ${n_axes}  # (input, axis) pairs that run along the output's columns


${mxu_dot}
${helpers}
def _epilogue(${epi_args}, *, sh, b0, r0, valid, ragged):
    """The reference's equations one output block can finish (`sh`: the shapes it sees; `valid`: its
    columns inside N, `ragged`: whether a block runs past N)."""
${body}
    return ${outs}


def _kernel(${refs}, acc_ref, *, sh, b0, bn, bk, k_total, n, nk):
    k = pl.program_id(2)

    def _part():  # this k-step's partial product, [b0, bn] f32
        lhs = lhs_ref[...]  # [b0, bk]
        rhs = rhs_ref[...]  # ${rhs_what}
        if k_total % bk:  # the last k-step runs past K: zero both operands there (garbage * 0 may be NaN)
            left = k_total - k * bk
            lhs = jnp.where(lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < left, lhs, jnp.zeros_like(lhs))
            rhs = jnp.where(lax.broadcasted_iota(jnp.int32, rhs.shape, ${rhs_k_axis}) < left, rhs, jnp.zeros_like(rhs))
        return _mxu_dot(lhs, rhs, ${dims})

    def _finish(acc):  # what one output block can finish, on the f32 sum rounded as the reference rounds
        dot = acc.astype(jnp.${dot_dtype})
        outs = _epilogue(
            ${epi_loads}, sh=sh, b0=b0, r0=pl.program_id(0) * b0, valid=n - pl.program_id(1) * bn, ragged=n % bn != 0
        )
${stores}

    if nk == 1:  # one k-step: the sum is the one partial product
        _finish(_part())
        return

    @pl.when(k < nk - 1)
    def _accumulate():  # the first k-step's product starts the sum (no zero fill); one dot in this branch
        acc = acc_ref[...]
        acc_ref[...] = jnp.where(k == 0, jnp.zeros_like(acc), acc) + _part()

    @pl.when(k == nk - 1)
    def _last():  # the epilogue shares the last dot's block: the scheduler overlaps it with the MXU's work
        _finish(acc_ref[...] + _part())


def workload(${args}):
    sh = (${shapes})  # every input's shape: the kernel's shapes are written from these
${hoisted}
    lhs = ${lhs}
    m, k_total = lhs.shape  # M rows, K contracted
    n = ${n}  # N, the output's columns
    b0 = min(BLOCK_ROWS, m)
    bn = min(BLOCK_COLS, n)
    bk = min(BLOCK_K, k_total)
    nb = pl.cdiv(n, bn)  # column blocks: one partial statistic each
    nk = pl.cdiv(k_total, bk)  # k-steps
    # the shapes the epilogue sees in one block: each input's N axis is the column block
    blk = tuple(tuple(bn if (a, d) in N_AXES else e for d, e in enumerate(s)) for a, s in enumerate(sh))

    # lhs is (M, K): the [b0, bk] tile of row block i at k-step k
    def lhs_map(i, j, k):
        return i, k

    # rhs is ${rhs_shape}: the ${rhs_what} tile of column block j at k-step k
    def rhs_map(i, j, k):
        return ${rhs_index}

${maps}
    out = pl.pallas_call(
        functools.partial(_kernel, sh=blk, b0=b0, bn=bn, bk=bk, k_total=k_total, n=n, nk=nk),
        out_shape=[${out_shapes}],
        grid=(pl.cdiv(m, b0), nb, pl.cdiv(k_total, bk)),
        in_specs=[pl.BlockSpec((b0, bk), lhs_map), pl.BlockSpec(${rhs_block}, rhs_map)${in_specs}],
        out_specs=[${out_specs}],
        scratch_shapes=[pltpu.VMEM((b0, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_matmul_rows",
    )(lhs, rhs${call_args})
${finish}
'''


GROUP_REDUCE = '''
def _group_reduce(x, size, op):
    """Each aligned run of `size` columns (a power of two) reduced by `op`, the result in every column of
    the run: log2(size) butterfly steps of lane rolls, lane-dense (a [rows, G, size] layout pads size
    columns to 128 lanes)."""
    lane = lax.broadcasted_iota(jnp.int32, x.shape, 1)
    step = 1
    while step < size:
        up = pltpu.roll(x, x.shape[1] - step, 1)  # column c holds x[c + step]
        down = pltpu.roll(x, step, 1)  # column c holds x[c - step]
        x = op(x, jnp.where((lane & step) == 0, up, down))
        step *= 2
    return x

'''


@dataclass
class Stages:
    """The epilogue split where it first needs a whole row: what the kernel runs, what runs after."""

    first: list[dict]  # equations the kernel runs on one output block (partial reductions excluded)
    partial: list[dict]  # reductions over the whole row: one partial per column block
    carried: list[str]  # [M, N] values the second pass reads (kernel outputs)
    second: list[dict]  # equations after the kernel, on whole arrays
    col_inputs: dict[int, int]  # {input index: its axis along N} for the kernel's other inputs
    row_inputs: set[int]  # inputs blocked by rows too (an [M, N] residual)
    kernel_inputs: list[str]  # the other inputs the kernel reads
    groups: set[int] = field(default_factory=set)  # group sizes (columns) the blocks must keep whole
    unit: dict[str, int] = field(default_factory=dict)  # values kept without their trailing unit axes
    unit_reduces: set[str] = field(default_factory=set)  # reductions over unit axes only (identities)
    grouped: dict[str, str] = field(default_factory=dict)  # {value: grp | gsum | gstat} (column groups)
    group_reduces: dict[str, str] = field(default_factory=dict)  # {value: its reduction over a group}

    @property
    def lanes(self) -> bool:
        """Column groups kept in the [rows, N] layout (each group's statistic in each of its columns,
        made by a butterfly of lane rolls) rather than as [rows, G, S], whose S columns pad to 128 lanes:
        where the padding costs more than the butterflies (`_epilogue_ops`)."""
        if len(self.groups) != 1 or (size := next(iter(self.groups))) & (size - 1) or size >= 128:
            return False
        return _epilogue_ops(self, True) < _epilogue_ops(self, False)


def _epilogue_ops(st: Stages, lanes: bool) -> float:
    """Vector ops of the epilogue per [rows, N] element: each equation once, times the lane padding of a
    [rows, G, S] layout, or plus 12 per butterfly step of each group reduction. Read off the llo estimates
    at full: 40k (S 16, 3 reductions) 1143 us of epilogue as [rows, G, S], 597 as lanes; 45k (S 32)
    565 and 811."""
    base = len(st.first) + 2 * len(st.partial)
    if not st.groups:
        return base
    size = max(st.groups)
    if lanes:
        return base + 12 * len(st.group_reduces) * max(1, size.bit_length() - 1)
    return base * max(1, 128 // size)


class _No(Exception):
    pass


def stages(program: Program, sp: Split, sym: Symbolic) -> Stages | None:
    """The two stages of the epilogue after `sp`'s dot, or None when some equation has no reading here."""
    try:
        return _stages(program, sp, sym)
    except _No:
        return None


def _stages(program: Program, sp: Split, sym: Symbolic) -> Stages:
    eqns = program["equations"]
    names = program["input_names"]
    sizes = sym.sizes
    dot_shapes = sym.out_shapes(eqns[sp.dot])  # [M, N] per traced size
    ms = [s[0] for s in dot_shapes]
    ns = [s[1] for s in dot_shapes]
    per_size_inputs = [sym.at(z)["inputs"] for z in sizes]

    def shape_kind(shapes: list[list[int]]) -> tuple[str, int]:
        """(kind, group size) of a value from its shape at every traced size."""
        r = {len(s) for s in shapes}
        if r == {0}:
            return "const", 0
        if len(r) != 1:
            raise _No("rank changes with size")
        rank = r.pop()
        at = list(zip(shapes, ms, ns, strict=True))
        if rank == 2 and all(s == [1, n] for s, _, n in at):
            return "row1", 0
        if rank == 1 and all(s == [n] for s, _, n in at):
            return "vec", 0
        if not all(s[0] == m for s, m, _ in at):
            raise _No("a value without the rows on axis 0")
        if rank == 2 and all(s[1] == n for s, _, n in at):
            return "col", 0
        if rank >= 3 and all(s[1] == n and all(d == 1 for d in s[2:]) for s, _, n in at):
            return "unit", 0
        if rank == 1 or (rank == 2 and all(s[1] == 1 for s in shapes)):
            return "row", 0
        groups = {n // s[1] if s[1] and n % s[1] == 0 else 0 for s, _, n in at}
        if len(groups) == 1 and (g := groups.pop()) > 1:
            if rank == 3 and all(s[2] == g for s in shapes):
                return "grp", g
            if rank == 3 and all(s[2] == 1 for s in shapes):
                return "gstat", g
            if rank == 2:
                return "gsum", g
        raise _No(f"shape {shapes[0]} has no column reading")

    kinds: dict[str, str] = {eqns[sp.dot]["outputs"][0]: "col"}
    late: set[str] = set()  # values after a whole-row reduction
    from_inputs: set[str] = set()  # values made from inputs and literals only (re-emitted where needed)
    col_inputs: dict[int, int] = {names.index(sp.rhs_root): 1 - sp.rhs_contract}
    row_inputs: set[int] = set()
    for i, nm in enumerate(names):
        if nm in (sp.lhs, sp.rhs_root):
            continue
        shapes = [list(ins[i]["shape"]) for ins in per_size_inputs]
        try:
            kind, _ = shape_kind(shapes)
        except _No:
            kind = "other"
        kinds[nm] = kind
        from_inputs.add(nm)
        if kind == "vec":
            col_inputs[i] = 0
        elif kind == "row1":
            col_inputs[i] = 1
        elif kind == "col":
            col_inputs[i] = 1
            row_inputs.add(i)
    hoist = set(sp.chain) | set(_folded(eqns, sp))
    epi = [(i, e) for i, e in enumerate(eqns) if i != sp.dot and i not in hoist]
    first, partial, second = [], [], []
    groups: set[int] = set()
    unit: dict[str, int] = {}
    unit_reduces: set[str] = set()
    grouped: dict[str, str] = {}
    group_reduces: dict[str, str] = {}
    for _, e in epi:
        ins = [a for a in e["inputs"] if not a.startswith("lit:")]
        out = e["outputs"][0]
        prim = e["primitive"]
        if len(e["outputs"]) != 1:
            raise _No(f"{prim} has several outputs")
        if all(a in from_inputs for a in ins):
            from_inputs.add(out)
            try:
                kinds[out] = shape_kind(sym.out_shapes(e))[0]
            except _No:
                kinds[out] = "other"
            if kinds[out] == "unit":  # a constant broadcast to [M, N, 1, 1]
                unit[out] = len(sym.out_shapes(e)[0])
            if kinds[out] in ("grp", "gsum", "gstat"):  # a constant broadcast to [M, G, 1]
                grouped[out] = kinds[out]
            first.append(e)
            continue
        if any(a in late for a in ins):
            late.add(out)
            second.append(e)
            continue
        kind, g = shape_kind(sym.out_shapes(e))
        in_kinds = [kinds.get(a, "const") for a in ins]
        if any(k == "other" for k in in_kinds):
            raise _No(f"{prim} reads an input with no column reading")
        if g:
            groups.add(g)
        if prim in COMBINE and in_kinds == ["col"] and kind == "row":
            if tuple(ast.literal_eval(e["params"]["axes"])) != (1,):
                raise _No(f"{prim} over {e['params']['axes']}")
            partial.append(e)
            late.add(out)
            continue
        if prim in ("reduce_sum", "reduce_max", "reduce_min"):
            axes = tuple(ast.literal_eval(e["params"]["axes"]))
            if in_kinds == ["grp"] and axes == (2,) and kind == "gsum":
                group_reduces[out] = prim
            elif in_kinds == ["unit"] and kind == "col" and min(axes) >= 2:
                unit_reduces.add(out)
            else:
                raise _No(f"{prim} over {axes} of a {in_kinds[0]} value")
        elif prim == "reshape":
            if {in_kinds[0], kind} not in ({"col", "grp"}, {"col", "unit"}):
                raise _No(f"reshape {in_kinds[0]} -> {kind}")
        elif prim == "broadcast_in_dim":
            dims = tuple(ast.literal_eval(str(e["params"]["broadcast_dimensions"])))
            src = in_kinds[0] if ins else "const"
            ok = (
                (src == "const" and dims == ())
                or (src == "vec" and kind == "row1" and dims == (1,))
                or (src == "gsum" and kind == "gstat" and dims == (0, 1))
                or (src in ("col", "unit") and kind in ("col", "unit") and dims[:2] == (0, 1))
            )
            if not ok:
                raise _No(f"broadcast_in_dim {src} -> {kind} along {dims}")
        elif prim not in ELEMENTWISE:
            raise _No(f"{prim} in the epilogue")
        if kind == "unit":
            unit[out] = len(sym.out_shapes(e)[0])
        if kind in ("grp", "gsum", "gstat"):
            grouped[out] = kind
        kinds[out] = kind
        first.append(e)
    if not partial and not groups and not unit:
        raise _No("an elementwise epilogue: matmul_epilogue blocks its columns already")
    result = program["outputs"][0]
    if result not in late and kinds.get(result) != "col":
        raise _No("the output is neither [M, N] nor after a whole-row reduction")
    # what the second pass reads from the first: [M, N] values (kernel outputs), partials, or inputs
    needed = {a for e in second for a in e["inputs"] if not a.startswith("lit:")}
    if result not in late:
        needed.add(result)
    partial_outs = {e["outputs"][0] for e in partial}
    carried = []
    for a in sorted(needed - late - partial_outs, key=lambda x: sym.index.get(x, -1)):
        if a in from_inputs:
            continue
        if kinds.get(a) != "col":
            raise _No(f"the second pass reads {a}, a {kinds.get(a)} value")
        carried.append(a)
    # equations made of inputs only that the second pass reads are emitted there again
    redo = _closure([e for e in first if e["outputs"][0] in from_inputs], needed)
    second = redo + second
    used = {a for e in first + partial for a in e["inputs"]}
    kernel_inputs = [n for n in names if n not in (sp.lhs, sp.rhs_root) and n in used]
    if any(kinds[n] == "other" for n in kernel_inputs):
        raise _No("the kernel reads an input with no column reading")
    first = [e for e in first if e["outputs"][0] not in from_inputs or e["outputs"][0] in used]
    return Stages(
        first,
        partial,
        carried,
        second,
        col_inputs,
        row_inputs,
        kernel_inputs,
        groups,
        unit,
        unit_reduces,
        grouped,
        group_reduces,
    )


def _closure(eqns: list[dict], wanted: set[str]) -> list[dict]:
    """Of `eqns` (in order), those whose outputs `wanted` needs, transitively."""
    need = set(wanted)
    keep = []
    for e in reversed(eqns):
        if e["outputs"][0] in need:
            keep.append(e)
            need |= set(e["inputs"])
    return keep[::-1]


def build(program: Program, plan: RowPlan, sym: Symbolic) -> Template | None:
    """The template when the program's epilogue needs its whole rows (or column groups, or unit
    axes squeezed) and every equation has a reading here; else None (matmul_epilogue's path)."""
    names = program["input_names"]
    if not plan.tiled:  # the rows do not separate through the whole program: the dot's rows still do
        dots = [e for e in program["equations"] if e["primitive"] == "dot_general"]
        if len(dots) != 1 or dots[0]["inputs"][0] not in names:
            return None
        axes = [0 if n == dots[0]["inputs"][0] else None for n in names]
        plan = RowPlan(rows=plan.rows, tiled=True, input_axes=axes)
    sp = split(program, plan)
    if sp is None or sym.mismatch:
        return None
    st = stages(program, sp, sym)
    if st is None:
        return None
    return _template(program, sp, st, sym)


def _template(program: Program, sp: Split, st: Stages, sym: Symbolic) -> Template:
    eqns = program["equations"]
    names = program["input_names"]
    dot_var = eqns[sp.dot]["outputs"][0]
    others = st.kernel_inputs
    rows = {dot_var} | {e["outputs"][0] for e in st.first if e["outputs"][0] not in set(names)}
    rows -= {e["outputs"][0] for e in st.first if _no_rows(e, sym)}

    size = next(iter(st.groups), 1)  # the column group's width

    def shape_of(e: dict, key: str) -> str:
        elems = sym.shape_elems(e, key)
        out = e["outputs"][0]
        if out in rows and elems:
            elems[0] = "b0"
        if out in st.unit:
            elems = elems[:2]
        if st.lanes and out in st.grouped:  # [rows, G, S] or [rows, G, 1] kept as [rows, G * S]
            elems = [elems[0], f"{elems[1]} * {size}"]
        return shape_source(elems)

    def extra(e: dict, expr: str) -> str:
        out, src = e["outputs"][0], operand(e["inputs"][0]) if e["inputs"] else ""
        if out in st.unit_reduces:  # a reduction over unit axes only: the value itself
            return src
        if not st.lanes:
            return expr
        if out in st.group_reduces:  # each group's statistic, in every column of the group
            dt = e["out_specs"][0]["dtype"]
            op = {"reduce_sum": "lax.add", "reduce_max": "lax.max", "reduce_min": "lax.min"}[
                st.group_reduces[out]
            ]
            if op == "lax.add":  # summed in f32, as XLA sums a bf16 reduction on a TPU
                src = f"lax.convert_element_type({src}, jnp.float32)"
            return f"lax.convert_element_type(_group_reduce({src}, {size}, {op}), jnp.{dt})"
        grouped_in = e["inputs"] and e["inputs"][0] in st.grouped
        if e["primitive"] == "reshape" and (out in st.grouped or grouped_in):
            return src  # [rows, N] <-> [rows, G, S]: the same [rows, N] value here
        if e["primitive"] == "broadcast_in_dim" and out in st.grouped and grouped_in:
            return src  # [rows, G] -> [rows, G, 1]: already in every column of its group
        return expr

    body = body_lines({**program, "equations": st.first}, shape_of, extra, sym)
    outs = [*st.carried]
    for e in st.partial:
        src, out, prim = e["inputs"][0], e["outputs"][0], e["primitive"]
        acc = f"lax.convert_element_type({src}, jnp.float32)" if prim == "reduce_sum" else src
        body.append(f"{out}_in = {acc}")
        body.append(
            f"if ragged:  # columns past N must not count\n"
            f"        {out}_in = jnp.where(lax.broadcasted_iota(jnp.int32, {out}_in.shape, 1) < valid, "
            f"{out}_in, jnp.asarray({IDENTITY[prim]}, {out}_in.dtype))"
        )
        body.append(f"{out}_part = {COMBINE[prim]}({out}_in, axis=1, keepdims=True)  # [b0, 1]")
        outs.append(f"{out}_part")
    body_src = "\n".join(f"    {line}" for line in body)
    result = program["outputs"][0]
    single = not st.second and not st.partial  # one pass: the kernel writes the output itself
    hoisted = body_lines({"equations": [eqns[i] for i in sp.chain]}, sym=sym)
    rhs_var = eqns[sp.dot]["inputs"][1]
    hoisted_src = "\n".join(f"    {line}  # layout only" for line in hoisted)
    hoisted_src += f"\n    rhs = {rhs_var}" if hoisted else f"\n    rhs = {sp.rhs_root}"
    maps, in_specs = [], []
    for nm in others:
        i = names.index(nm)
        s = program["inputs"][i]
        if scalars.is_scalar(s):  # a temperature, a scale: one SMEM word (templates/scalars.py)
            maps.append(scalars.map_comment(nm, s))
            in_specs.append(f", {scalars.SMEM_SPEC}")
            continue
        rank = len(s["shape"])
        col = st.col_inputs.get(i)
        tiled = i in st.row_inputs
        idx = ", ".join("i" if (tiled and d == 0) else "j" if d == col else "0" for d in range(rank))
        idx = (idx + ("," if rank == 1 else "")) or "()"
        what = "row block i, column block j" if tiled else "column block j" if col is not None else "whole"
        if idx == "i, j":  # an [M, N] input the epilogue reads on the last k-step only
            maps.append(
                f"    # {nm} is {tuple(s['shape'])} at {sym.sizes[0]}: {what}, fetched halfway through the block's\n"
                "    # k-steps (the block before it until then), so that its DMA and the previous output block's\n"
                "    # writeback do not fall on one step\n"
                f"    def {nm}_map(i, j, k):\n"
                "        flat = jnp.maximum(i * nb + j - (k < nk // 2).astype(jnp.int32), 0)\n"
                "        return flat // nb, flat % nb\n"
            )
        else:
            maps.append(f"    # {nm} is {tuple(s['shape'])} at {sym.sizes[0]}: {what}\n"
                        f"    def {nm}_map(i, j, k):\n        return {idx}\n")  # fmt: skip
        dims = ["b0" if (tiled and d == 0) else "bn" if d == col else f"sh[{i}][{d}]" for d in range(rank)]
        in_specs.append(f", pl.BlockSpec({shape_source(dims)}, {nm}_map)")
    out_shapes, out_specs, stores, refs = [], [], [], []
    dtypes = {o: s["dtype"] for e in eqns for o, s in zip(e["outputs"], e["out_specs"], strict=True)}
    for c, v in enumerate(st.carried):
        maps.append(f"    # {v} is [M, N]: row block i, column block j, resident across k\n"
                    f"    def {v}_map(i, j, k):\n        return i, j\n")  # fmt: skip
        out_shapes.append(f"jax.ShapeDtypeStruct((m, n), jnp.{dtypes[v]})")
        out_specs.append(f"pl.BlockSpec((b0, bn), {v}_map)")
        stores.append(f"        {v}_ref[...] = outs[{c}].astype({v}_ref.dtype)")
        refs.append(f"{v}_ref")
    for c, e in enumerate(st.partial, start=len(st.carried)):
        v = e["outputs"][0]
        dt = "float32" if e["primitive"] == "reduce_sum" else dtypes[v]
        maps.append(f"    # {v}'s partials are [column blocks, M, 1]: column block j's for row block i\n"
                    f"    def {v}_map(i, j, k):\n        return j, i, 0\n")  # fmt: skip
        out_shapes.append(f"jax.ShapeDtypeStruct((nb, m, 1), jnp.{dt})")
        out_specs.append(f"pl.BlockSpec((None, b0, 1), {v}_map)")
        stores.append(f"        {v}_ref[...] = outs[{c}].astype({v}_ref.dtype)")
        refs.append(f"{v}_ref")
    finish = [f"    {', '.join([*st.carried, *(e['outputs'][0] + '_parts' for e in st.partial)])}, = out"]
    for e in st.partial:
        v = e["outputs"][0]
        finish.append(f"    {v} = {COMBINE[e['primitive']]}({v}_parts, axis=0)[:, 0].astype(jnp.{dtypes[v]})"
                      "  # [M]: the column blocks' partials combined")  # fmt: skip
    finish += [
        f"    {line}" for line in body_lines({**program, "equations": st.second}, sym=sym, mosaic=False)
    ]
    finish.append(f"    return {result}")
    if single:
        finish = [f"    return out[0]  # {result}"]
    kind = dot_kind(program, eqns[sp.dot])
    n_axes = {(names.index(sp.rhs_root), 1 - sp.rhs_contract)} | {
        (i, d) for i, d in st.col_inputs.items() if names[i] in others
    }
    passes = (
        "Every equation finishes in one output block (groups of columns stay whole in a block), so the "
        "kernel writes the output itself."
        if single
        else "Each reduction over the whole row is written as one partial per column block; after the "
        "kernel they are combined and the rest of the reference's equations run on whole arrays."
    )
    fixed = {
        "helpers": GROUP_REDUCE if st.lanes else "",
        "passes": passes,
        "mxu_dot": mxu_dot_source(kind),
        "dot_note": mxu_dot_note(kind),
        "epi_args": ", ".join([dot_var, *others]),
        "body": body_src,
        "outs": "(" + ", ".join(outs) + ",)",
        "refs": ", ".join(["lhs_ref", "rhs_ref", *[f"{n}_ref" for n in others], *refs]),
        "dims": sp.dims,
        "dot_dtype": sp.dot_dtype,
        "epi_loads": ", ".join(["dot", *[scalars.load_input(program, n) for n in others]]),
        "stores": "\n".join(stores),
        "args": ", ".join(names),
        "shapes": ", ".join(f"{n}.shape" for n in names) + ("," if len(names) == 1 else ""),
        "hoisted": hoisted_src,
        "lhs": sp.lhs,
        "n": f"rhs.shape[{1 - sp.rhs_contract}]",
        "rhs_shape": "(K, N)" if sp.rhs_contract == 0 else "(N, K)",
        "rhs_what": "[bk, bn]" if sp.rhs_contract == 0 else "[bn, bk]",
        "rhs_k_axis": str(sp.rhs_contract),
        "rhs_index": "k, j" if sp.rhs_contract == 0 else "j, k",
        "rhs_block": "(bk, bn)" if sp.rhs_contract == 0 else "(bn, bk)",
        "n_axes": "{" + ", ".join(f"({a}, {d})" for a, d in sorted(n_axes)) + "}",
        "maps": "\n".join(maps).rstrip("\n"),
        "in_specs": "".join(in_specs),
        "out_specs": ", ".join(out_specs),
        "out_shapes": ", ".join(out_shapes),
        "call_args": "".join(f", {scalars.call_arg(program, n)}" for n in others),
        "finish": "\n".join(finish),
    }
    if single:  # the kernel's one output is the program's: its own name and shape
        o = program["out_specs"][0]
        fixed["out_shapes"] = f"jax.ShapeDtypeStruct((m, n), jnp.{o['dtype']})"
    if sym.unsolved:
        raise ValueError(
            "numbers that follow the size in no way it can write: " + "; ".join(sym.unsolved[:3])
        )
    return _costed(program, sp, st, sym, fixed, kind, single)


def _no_rows(e: dict, sym: Symbolic) -> bool:
    """A value with no row axis (a [1, N] bias row, a scalar): its shape is written as it is."""
    shapes = sym.out_shapes(e)
    return not shapes[0] or shapes[0][0] == 1 and len(shapes[0]) == 2 and shapes[0][1] != 1


def _costed(
    program: Program, sp: Split, st: Stages, sym: Symbolic, fixed: dict[str, str], kind: str, single: bool
) -> Template:
    """Blocks for the target: the cheapest by a roofline-like cost whose VMEM count (blocks at their
    dtypes, the accumulator, the epilogue's temporaries) stays under 48 MiB."""
    names = program["input_names"]
    at = sym.at(sym.target)
    m_t, k_t = at["inputs"][names.index(sp.lhs)]["shape"]
    n_t = sym.eqn_shapes_at(sym.target)[sp.dot][0][1]
    fixed["target"] = f"{sym.target}: M={m_t}, K={k_t}, N={n_t}"
    item = itemsize(at["inputs"][names.index(sp.lhs)]["dtype"])
    out_item = itemsize(program["out_specs"][0]["dtype"])
    dtypes = {
        o: s["dtype"] for e in program["equations"] for o, s in zip(e["outputs"], e["out_specs"], strict=True)
    }
    carried_item = sum(itemsize(dtypes[v]) for v in st.carried) if not single else out_item
    align = math.lcm(128, *st.groups) if st.groups else 128
    # multiples of 32 rows: every dtype's sublane tile (a bf16 partial's (bm, 1) block wants 16)
    row_blocks = tuple(b for b in (32, 64, 128, 256, 512, 1024, 2048) if b <= max(32, m_t))
    col_blocks = tuple(b for b in _k_blocks(n_t) if b % align == 0 and (b < n_t or b == n_t)) or (n_t,)
    if n_t % align == 0 and n_t <= 4096 and n_t not in col_blocks:
        col_blocks = (*col_blocks, n_t)
    k_blocks = _k_blocks(k_t)
    ks = check_ks(sym, names, sp.lhs)  # K where the judge checks: which k steps run there
    # a group's [rows, G, S] layout pads S columns to 128 lanes: its temporaries grow by 128 / S; kept
    # as [rows, N] (st.lanes) each reduction over a group is log2(S) roll, roll, select, combine steps
    pad = 1 if st.lanes else max([128 // g for g in st.groups if g < 128] or [1])
    n_ops = _epilogue_ops(st, st.lanes)
    other_ins = [(at["inputs"][names.index(n)], names.index(n)) for n in st.kernel_inputs]

    def dims_of(c: Mapping[str, Any]) -> tuple[int, int, int]:
        return min(int(c["block_rows"]), m_t), min(int(c["block_cols"]), n_t), min(int(c["block_k"]), k_t)

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bm, bn, bk = dims_of(c)
        blocks = 2 * item * (bm * bk + bk * bn) + 2 * carried_item * bm * bn + 4 * bm * bn
        blocks += 2 * len(st.partial) * bm * 128 * 4  # a (bm, 1) partial pads to 128 lanes
        for s, i in other_ins:
            blk = [bm if (i in st.row_inputs and a == 0) else bn if a == st.col_inputs.get(i) else x
                   for a, x in enumerate(s["shape"])]  # fmt: skip
            blocks += 2 * math.prod(blk) * itemsize(s["dtype"])
        # Mosaic's scoped allocation is the blocks (42k at 1024 x 2048 x 2048: 41 MiB counted, 40.1
        # allocated); a column group's [rows, G, S] temporaries pad S to 128 lanes, which the block count
        # does not see: one padded f32 value more (45k's 512-row, N-whole kernel spilled 136 MiB)
        # Kept as [rows, N], each group reduction keeps f32 [bm, bn] values live (the butterfly's rolls):
        # 40k's GroupNorm (3 of them) at 1024 x 2048 asked Mosaic for 73.3 MiB, 33 of them blocks
        if st.lanes:
            return int(blocks + 4 * bm * bn * (1 + len(st.group_reduces)))
        return int(blocks + (4 * bm * bn * pad if pad > 1 else 0))

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        out = []
        for key, legal in (("block_rows", row_blocks), ("block_cols", col_blocks), ("block_k", k_blocks)):
            if int(c[key]) not in legal:
                out.append(f"{key}={c[key]} is not one of {list(legal)}")
        return out

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        bm, bn, bk = dims_of(c)
        row_steps, col_steps = -(-m_t // bm), -(-n_t // bn)
        steps = row_steps * col_steps * -(-k_t // bk)
        # the left operand is read once per column block, the right once per row block; the carried
        # values are written once and read back by the second pass
        hbm = item * (m_t * k_t * col_steps + k_t * n_t * row_steps) + carried_item * m_t * n_t * (
            1 if single else 2
        )
        compute = flops_us(m_t, k_t, n_t, bm, bn, kind) + accumulator_us(steps, bm, bn)
        epilogue = branch_us(m_t * n_t, n_ops)  # on the last k-step, beside no MXU work
        penalty = 1e6 if vmem(c, d) > _FIRST_VMEM else 0.0
        return max(compute, hbm / 1.6e12 * 1e6) + epilogue + 0.35 * steps + penalty

    def config(bm: int, bn: int, bk: int) -> dict[str, int]:
        return {"block_rows": bm, "block_cols": bn, "block_k": bk}

    fits = [config(bm, bn, bk) for bm in row_blocks for bn in col_blocks for bk in k_blocks
            if vmem(config(bm, bn, bk), {}) <= _FIRST_VMEM and k_checkable(bk, k_t, ks, k_strict(sym))]  # fmt: skip
    first = (
        min(fits, key=lambda c: cost(c, {})) if fits else config(row_blocks[0], col_blocks[0], k_blocks[0])
    )
    return Template(
        name="matmul_rows",
        operators=("program",),
        source=SOURCE,
        tunables={"block_rows": row_blocks, "block_cols": col_blocks, "block_k": k_blocks},
        dims_of=lambda sizes: {"M": m_t, "K": k_t, "N": n_t},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=first,
        fixed=lambda op: fixed,
        constraints=(
            f"block_rows in {list(row_blocks)}",
            f"block_cols in {list(col_blocks)} (multiples of {align}: column groups stay whole in a block)",
            f"block_k in {list(k_blocks)} (a last k-step past K={k_t} is masked)",
        ),
        grid_axes=lambda c: ["rows", "cols", "k"],
        semantics=lambda c: ["parallel", "parallel", "arbitrary"],
    )
