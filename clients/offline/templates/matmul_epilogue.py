"""Tiled matmul with the reference's epilogue fused: grid (row blocks, column blocks, k-steps), an f32
VMEM accumulator.

Serves a traced program with one 2-D dot_general whose left operand is a row-carrying input used by
nothing else and whose right operand is an input (possibly transposed, cast or reshaped first: layout
work, done before the pallas_call). Every other equation is the epilogue: it runs once per output
block, on the last k-step, on the accumulator rounded to the dot's own output dtype, with the
reference's own ops (bias, activation, residual, row reductions).

Columns are blocked when the epilogue keeps columns apart (elementwise ops, a bias along N, a residual
of the output's shape): at a production N (28672 for a 4096x14336 MLP) a whole-column block leaves room
for only a few rows, and the right operand is streamed once per row block. An epilogue that mixes
columns (softmax, logsumexp, a reduction over the last axis) keeps them whole.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, shape_source
from maxkernel.clients.offline.rows import RowPlan
from maxkernel.clients.offline.templates import scalars
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.batched_matmul import check_ks, k_checkable, k_strict
from maxkernel.clients.offline.templates.row_blocks import block_align, legal_blocks, nbytes, row_body
from maxkernel.clients.offline.templates.tile_cost import accumulator_us, flops_us
from maxkernel.tpu_tools.problem.emit import (
    Program,
    body_lines,
    dot_kind,
    mxu_dot_note,
    mxu_dot_source,
    operand,
)

LAYOUT = ("transpose", "convert_element_type", "reshape")
# The first proposal: the cheapest blocks by the cost model at the target whose VMEM count (an upper bound:
# f32 accumulator and output, two buffers of each operand) stays under 40 MiB, under every chip's limit the
# kernel sets (3/4 of physical VMEM, at most 64 MiB; 7x: 48 MiB). At 19k's 4096x8192x8192 the 24 MiB it had kept
# 512-row blocks, streaming the weight 8 times (memory-bound, 866 us llo); 1024 rows are compute-bound (675 us).
_FIRST_VMEM = 48 * MiB  # this count is the compiler's within 1%: room under the 64 MiB limit it asks for

SOURCE = '''"""Tiled matmul with a fused epilogue (offline template `matmul`), generated from the reference's program.

Grid (row blocks, column blocks, k-steps), k innermost and "arbitrary": the f32 accumulator starts as
the first k-step's product (no zero fill); the last k-step adds its product to it and runs the reference's
own epilogue on the sum (rounded to the dot's output dtype, as the reference rounds) in the same branch as
its dot, so the epilogue's vector work overlaps the MXU's, and each output block is written to HBM once. ${columns_note} The dot
runs as XLA runs the reference's on a TPU (`_mxu_dot`: ${dot_note}).

Shape-generic: M, K, N and every epilogue shape are read from the inputs when the kernel is traced
(`sh`); the blocks were chosen for the target size (${target}) and clamp to smaller inputs. A last row
block past M is partial (rows are independent; the store drops the rest); a last k-step past K is
masked to zeros on both operands, so it adds nothing. A last column block past N is partial: columns
are independent, and the store drops the rest.
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

def _epilogue(${epi_args}, *, sh, b0, r0):
    """The reference's equations after its dot_general, on one output block (`sh`: the shapes it sees)."""
${body}
    return ${outs}


def _kernel(${refs}, acc_ref, *, sh, b0, bk, k_total, nk):
    k = pl.program_id(2)

    def _part():  # this k-step's partial product, [b0, bn] f32
        lhs = lhs_ref[...]  # [b0, bk]
        rhs = rhs_ref[...]  # ${rhs_what}
        if k_total % bk:  # the last k-step runs past K: zero both operands there (garbage * 0 may be NaN)
            left = k_total - k * bk
            lhs = jnp.where(lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < left, lhs, jnp.zeros_like(lhs))
            rhs = jnp.where(lax.broadcasted_iota(jnp.int32, rhs.shape, ${rhs_k_axis}) < left, rhs, jnp.zeros_like(rhs))
        return _mxu_dot(lhs, rhs, ${dims})

    def _finish(acc):  # the reference's epilogue on the f32 sum (rounded as the reference rounds), stored once
        dot = acc.astype(jnp.${dot_dtype})
        outs = _epilogue(${epi_loads}, sh=sh, b0=b0, r0=pl.program_id(0) * b0)
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
    bn = n if BLOCK_COLS is None else min(BLOCK_COLS, n)
    bk = min(BLOCK_K, k_total)
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
        functools.partial(_kernel, sh=blk, b0=b0, bk=bk, k_total=k_total, nk=pl.cdiv(k_total, bk)),
        out_shape=[${out_shapes}],
        grid=(pl.cdiv(m, b0), pl.cdiv(n, bn), pl.cdiv(k_total, bk)),
        in_specs=[pl.BlockSpec((b0, bk), lhs_map), pl.BlockSpec(${rhs_block}, rhs_map)${in_specs}],
        out_specs=[${out_specs}],
        scratch_shapes=[pltpu.VMEM((b0, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_matmul",
    )(lhs, rhs${call_args})
    return ${result}
'''


@dataclass
class Split:
    dot: int  # equation index
    chain: list[int]  # equation indices hoisted out (layout work on the right operand)
    lhs: str
    rhs_root: str
    rhs_contract: int  # 0: rhs is [K, N]; 1: rhs is [N, K]
    k: int
    n: int
    dot_dtype: str
    dims: str  # the kernel's dimension numbers (a hoisted transpose folds into the contraction)


def _users(eqns: list[dict], name: str) -> list[int]:
    return [i for i, e in enumerate(eqns) if name in e["inputs"]]


def split(program: Program, plan: RowPlan) -> Split | None:
    """Where the program's dot is, when it has the shape this template serves; else None."""
    eqns = program["equations"]
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general"]
    if not plan.tiled or len(dots) != 1 or program["outputs"] == [] or len(program["out_specs"]) != 1:
        return None
    d = dots[0]
    e = eqns[d]
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    lhs, rhs = e["inputs"]
    names = program["input_names"]
    if lhs not in names or plan.input_axes[names.index(lhs)] != 0 or lb or rb or tuple(lc) != (1,):
        return None
    if len(program["inputs"][names.index(lhs)]["shape"]) != 2 or _users(eqns, lhs) != [d]:
        return None
    chain, cur = [], rhs
    while cur not in names:
        prod = next((i for i, x in enumerate(eqns) if cur in x["outputs"]), None)
        if prod is None or eqns[prod]["primitive"] not in LAYOUT or len(eqns[prod]["inputs"]) != 1:
            return None
        if _users(eqns, cur) != [chain[-1] if chain else d]:
            return None
        chain.append(prod)
        cur = eqns[prod]["inputs"][0]
    if plan.input_axes[names.index(cur)] is not None or _users(eqns, cur) != [chain[-1] if chain else d]:
        return None
    if cur in program["outputs"] or tuple(rc) not in ((0,), (1,)):
        return None
    shape = e["out_specs"][0]["shape"]
    k = program["inputs"][names.index(lhs)]["shape"][1]
    dims, contract = e["params"]["dimension_numbers"], rc[0]
    if len(chain) == 1 and eqns[chain[0]]["primitive"] == "transpose":  # x @ w.T: contract w's axis 1
        chain, contract = [], 1 - rc[0]
        dims = f"(((1,), ({contract},)), ((), ()))"
    return Split(d, chain[::-1], lhs, cur, contract, k, shape[1], e["out_specs"][0]["dtype"], dims)


def _folded(eqns: list[dict], sp: Split) -> list[int]:
    """The transpose folded into the contraction (not re-emitted anywhere)."""
    rhs = eqns[sp.dot]["inputs"][1]
    if sp.chain or rhs == sp.rhs_root:
        return []
    return [i for i, e in enumerate(eqns) if rhs in e["outputs"]]


# Epilogue equations that keep columns apart: each output element reads the same element of its inputs.
ELEMENTWISE = frozenset(
    """add sub mul div rem max min neg abs sign floor ceil round exp exp2 log log1p expm1 tanh logistic sqrt
    rsqrt cbrt integer_pow pow square erf erfc erf_inv sin cos tan atan2 select_n convert_element_type eq ne
    lt le gt ge and or not xor clamp is_finite nextafter reduce_precision copy copy_p""".split()
)


def _column_axes(
    program: Program, plan: RowPlan, sp: Split, epi: list[dict], others: list[str], sym: Symbolic
) -> dict[int, int] | None:
    """{input index: its axis along the output's columns}, when the epilogue keeps columns apart (then
    the columns can be blocked); None when it mixes them, or when the kernel could not say so safely."""
    names = program["input_names"]
    outs = program["out_specs"]
    if sp.chain or len(outs) != 1 or len(outs[0]["shape"]) != 2 or outs[0]["shape"][1] != sp.n:
        return None
    axes = {names.index(sp.rhs_root): 1 - sp.rhs_contract}
    for name in others:
        i = names.index(name)
        shape = program["inputs"][i]["shape"]
        tiled = plan.input_axes[i] is not None
        if not shape or (math.prod(shape) == 1 and not tiled):
            continue  # a scalar (or a one-element array): the same in every block
        if len(shape) == 1 and shape[0] == sp.n and not tiled:
            axes[i] = 0  # a bias along N
        elif len(shape) == 2 and shape[1] == sp.n and (tiled or shape[0] == 1):
            axes[i] = 1  # a residual of the output's shape, or a (1, N) row
        else:
            return None
    written = {f"sh[{a}][{d}]" for a, d in axes.items()}
    for e in epi:
        if e["primitive"] in ELEMENTWISE:
            continue
        out_shape = e["out_specs"][0]["shape"]
        if e["primitive"] == "reshape" and e["inputs"][0] in names and out_shape == [1, sp.n]:
            # a bias along N made a (1, N) row (Flax's Dense): its N must be written from the bias's axis
            if (
                axes.get(names.index(e["inputs"][0])) != 0
                or sym.shape_elems(e, "new_sizes")[-1] not in written
            ):
                return None
            continue
        if e["primitive"] != "broadcast_in_dim":
            return None
        if math.prod(out_shape) == 1:
            continue  # a one-element value made (1, 1): the same in every block
        dims = tuple(ast.literal_eval(str(e["params"]["broadcast_dimensions"])))
        if len(out_shape) != 2 or out_shape[1] != sp.n or dims not in ((), (1,), (0, 1)):
            return None
        if sym.shape_elems(e, "shape")[-1] not in written:  # N written from an axis the block does not see
            return None
    return axes


def _k_blocks(k: int) -> tuple[int, ...]:
    """Block sizes along K at the target: lane multiples up to K (one past K clamps to the whole K)."""
    top = max(128, 1 << max(k - 1, 0).bit_length())
    return tuple(b for b in (128, 256, 512, 1024, 2048, 4096) if b <= top)


def build(program: Program, plan: RowPlan, sp: Split, sym: Symbolic) -> Template:
    """The template for a program `split` accepted: rows and K blocked for the target size."""
    eqns = program["equations"]
    names = program["input_names"]
    hoist = set(sp.chain) | set(_folded(eqns, sp))
    epi = [e for i, e in enumerate(eqns) if i != sp.dot and i not in hoist]
    dot_var = eqns[sp.dot]["outputs"][0]
    others = [n for n in names if n not in (sp.lhs, sp.rhs_root)]
    body = row_body(program, [plan], sym, epi)
    hoisted = body_lines({"equations": [eqns[i] for i in sp.chain]}, sym=sym)
    rhs_var = eqns[sp.dot]["inputs"][1]
    hoisted_src = "\n".join(f"    {line}  # layout only" for line in hoisted)
    hoisted_src += f"\n    rhs = {rhs_var}" if hoisted else f"\n    rhs = {sp.rhs_root}"
    outs = [operand(o) for o in program["outputs"]]
    o_spec = program["out_specs"][0]
    cols = _column_axes(program, plan, sp, epi, others, sym)
    maps, in_specs = [], []
    for n in others:
        i = names.index(n)
        s = program["inputs"][i]
        if scalars.is_scalar(s):  # a step, a scale: one SMEM word (templates/scalars.py)
            maps.append(scalars.map_comment(n, s))
            in_specs.append(f", {scalars.SMEM_SPEC}")
            continue
        rank = len(s["shape"])
        tiled = plan.input_axes[i] is not None
        col = None if cols is None else cols.get(i)
        idx = ", ".join("i" if (tiled and d == 0) else "j" if d == col else "0" for d in range(rank))
        idx = (idx + ("," if rank == 1 else "")) or "()"
        what = "row block i" if tiled else "the whole array, fetched once"
        if col is not None:
            what = "row block i, column block j" if tiled else "column block j"
        maps.append(
            f"    # {n} is {tuple(s['shape'])} at {sym.sizes[0]}: {what}\n"
            f"    def {n}_map(i, j, k):\n        return {idx}\n"
        )
        dims = ["b0" if (tiled and d == 0) else "bn" if d == col else f"sh[{i}][{d}]" for d in range(rank)]
        in_specs.append(f", pl.BlockSpec({shape_source(dims)}, {n}_map)")
    rank = len(o_spec["shape"])
    if cols is not None:
        o_idx, o_what = "i, j", "row block i, column block j"
    else:
        o_idx = ", ".join("i" if d == 0 else "0" for d in range(rank)) + ("," if rank == 1 else "")
        o_what = "row block i"
    maps.append(f"    # the output is {tuple(o_spec['shape'])} at {sym.sizes[0]}: {o_what}, resident across k\n"
                f"    def o0_map(i, j, k):\n        return {o_idx}\n")  # fmt: skip
    whole = sym.output_shape(0)
    o_dims = ["b0" if d == 0 else "bn" if cols is not None else whole[d] for d in range(rank)]
    kind = dot_kind(program, eqns[sp.dot])
    fixed = {
        "mxu_dot": mxu_dot_source(kind),
        "dot_note": mxu_dot_note(kind),
        "epi_args": ", ".join([dot_var, *others]),
        "body": body,
        "outs": "(" + ", ".join(outs) + ",)",
        "refs": ", ".join(["lhs_ref", "rhs_ref", *[f"{n}_ref" for n in others], "o0_ref"]),
        "dims": sp.dims,
        "dot_dtype": sp.dot_dtype,
        "epi_loads": ", ".join(["dot", *[scalars.load_input(program, n) for n in others]]),
        "stores": "        o0_ref[...] = outs[0].astype(o0_ref.dtype)",
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
        "n_axes": "{" + ", ".join(f"({a}, {d})" for a, d in sorted((cols or {}).items())) + "}"
        if cols
        else "set()",
        "columns_note": "Columns are blocked too (the epilogue keeps them apart)."
        if cols is not None
        else "Columns stay whole: the epilogue mixes them.",
        "maps": "\n".join(maps).rstrip("\n"),
        "in_specs": "".join(in_specs),
        "out_specs": f"pl.BlockSpec({shape_source(o_dims)}, o0_map)",
        "out_shapes": f"jax.ShapeDtypeStruct({shape_source(whole)}, jnp.{o_spec['dtype']})",
        "call_args": "".join(f", {scalars.call_arg(program, n)}" for n in others),
        "result": "out[0]",
    }
    if sym.unsolved:
        raise ValueError(
            "numbers that follow the size in no way it can write: " + "; ".join(sym.unsolved[:3])
        )
    at = sym.at(sym.target)
    m_t, k_t = at["inputs"][names.index(sp.lhs)]["shape"]
    n_t = sym.eqn_shapes_at(sym.target)[sp.dot][0][1]  # the dot's (M, N) at the target
    row_blocks = legal_blocks(program, [plan], sym)[0]
    k_blocks = _k_blocks(k_t)
    ks = check_ks(sym, names, sp.lhs)  # K where the judge checks: which k steps run there
    fixed["target"] = f"{sym.target}: M={m_t}, K={k_t}, N={n_t}"
    item = 2 if "16" in at["inputs"][names.index(sp.lhs)]["dtype"] else 4
    out_item = 2 if "16" in o_spec["dtype"] else 4
    col_blocks: tuple[int, ...] = (n_t,)  # N whole
    if cols is not None:  # lane multiples up to N that every input blocked along N can take
        ins = at["inputs"]
        align = max(block_align(len(ins[a]["shape"]), d, ins[a]["dtype"]) for a, d in cols.items())
        col_blocks = tuple(b for b in _k_blocks(n_t) if b % align == 0) or (n_t,)
    # each other input's shape at the target and its axis along N (None: not blocked by columns)
    other_specs = [(at["inputs"][names.index(n)]["shape"], (cols or {}).get(names.index(n))) for n in others]

    def dims_of(c: Mapping[str, Any]) -> tuple[int, int, int]:
        bn = min(int(c.get("block_cols") or n_t), n_t)
        return min(int(c["block_rows"]), m_t), bn, min(int(c["block_k"]), k_t)

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bm, bn, bk = dims_of(c)
        # the other inputs' blocks: columns blocked where they run along N, f32 upper bound, two buffers
        other = 0
        for shape, col in other_specs:
            blk = [
                bn if a == col else min(bm, x) if a == 0 and len(shape) == 2 else x
                for a, x in enumerate(shape)
            ]
            other += 2 * nbytes(blk, "float32")
        # the compiler's scoped VMEM is the pipelined blocks and the accumulator: 40.6 MiB for 50k at
        # (512, 8192, 256) where this counts 40.5 (`maxkernel analyze`); the epilogue adds no buffer there
        return int(2 * item * (bm * bk + bk * bn) + 2 * out_item * bm * bn + 4 * bm * bn + other)

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        out = []
        if int(c["block_rows"]) not in row_blocks:
            out.append(f"block_rows={c['block_rows']} is not one of {list(row_blocks)}")
        if int(c["block_k"]) not in k_blocks:
            out.append(f"block_k={c['block_k']} is not one of {list(k_blocks)}")
        if cols is not None and int(c["block_cols"]) not in col_blocks:
            out.append(f"block_cols={c['block_cols']} is not one of {list(col_blocks)}")
        return out

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        bm, bn, bk = dims_of(c)
        row_steps, col_steps = -(-m_t // bm), -(-n_t // bn)
        steps = row_steps * col_steps * -(-k_t // bk)
        # the left operand is read once per column block, the right once per row block
        hbm = item * (m_t * k_t * col_steps + k_t * n_t * row_steps + m_t * n_t)
        compute = flops_us(m_t, k_t, n_t, bm, bn, kind)
        acc = accumulator_us(steps, bm, bn)
        penalty = 1e6 if vmem(c, d) > _FIRST_VMEM else 0.0
        return max(compute + acc, hbm / 1.6e12 * 1e6) + 0.35 * steps + penalty

    def config(bm: int, bn: int, bk: int) -> dict[str, int]:
        c = {"block_rows": bm, "block_k": bk}
        return c | ({"block_cols": bn} if cols is not None else {})

    fits = [
        config(bm, bn, bk)
        for bm in row_blocks
        for bn in col_blocks
        for bk in k_blocks
        if (cols is None or bn <= 2048) and vmem(config(bm, bn, bk), {}) <= _FIRST_VMEM and k_checkable(bk, k_t, ks, k_strict(sym))
    ]  # fmt: skip
    first = (
        min(fits, key=lambda c: cost(c, {}))
        if fits
        else config(min(row_blocks), min(col_blocks), min(k_blocks))
    )
    tunables: dict[str, tuple] = {"block_rows": row_blocks, "block_k": k_blocks}
    constraints = [
        f"block_rows in {list(row_blocks)}",
        f"block_k in {list(k_blocks)} (a last k-step past K={k_t} is masked)",
    ]
    if cols is not None:
        tunables["block_cols"] = col_blocks
        constraints.append(f"block_cols in {list(col_blocks)} (a last column block past N={n_t} is partial)")
    else:
        fixed["block_cols"] = "None"
    return Template(
        name="matmul",
        operators=("program",),
        source=SOURCE,
        tunables=tunables,
        dims_of=lambda sizes: {"M": m_t, "K": k_t, "N": n_t},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=first,
        fixed=lambda op: fixed,
        constraints=tuple(constraints),
        grid_axes=lambda c: ["rows", "cols", "k"],
        semantics=lambda c: ["parallel", "parallel", "arbitrary"],
    )
