"""Tiled matmul with the reference's epilogue fused: grid (row blocks, k-steps), an f32 VMEM accumulator.

Serves a traced program with one 2-D dot_general whose left operand is a row-carrying input used by
nothing else and whose right operand is an input (possibly transposed, cast or reshaped first: layout
work, done before the pallas_call). Every other equation is the epilogue: it runs once per row block,
on the last k-step, on the accumulator rounded to the dot's own output dtype, with the reference's own
ops (bias, activation, residual, row reductions). Columns stay whole, so epilogues that reduce over the
last axis (softmax, logsumexp) are served too.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from maxkernel.clients.offline.rows import RowPlan
from maxkernel.clients.offline.templates import MiB, Template
from maxkernel.tpu_tools.problem.emit import Program, body_lines, operand

LAYOUT = ("transpose", "convert_element_type", "reshape")

SOURCE = '''"""Tiled matmul with a fused epilogue (offline template `matmul`), generated from the reference's program.

Grid (row blocks, k-steps), k innermost and "arbitrary": the f32 accumulator is zeroed on the first
k-step; on the last, the reference's own epilogue runs on it (rounded to the dot's output dtype, as
the reference rounds) and each output block is written to HBM once. Columns stay whole.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}
BLOCK_K = ${block_k}
ROWS = ${rows}  # M, the output's leading axis
K = ${k}  # the contracted axis
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _epilogue(${epi_args}, row0):
    """The reference's equations after its dot_general, on one block of rows."""
${body}
    return ${outs}


def _kernel(${refs}, acc_ref):
    k = pl.program_id(1)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += lax.dot_general(
        lhs_ref[...], rhs_ref[...], ${dims}, preferred_element_type=jnp.float32
    )

    @pl.when(k == pl.num_programs(1) - 1)
    def _store():
        dot = acc_ref[...].astype(jnp.${dot_dtype})
        outs = _epilogue(${epi_loads}, pl.program_id(0) * BLOCK_ROWS)
${stores}


def workload(${args}):
    if ROWS % BLOCK_ROWS or K % BLOCK_K:
        raise ValueError(f"M={ROWS}, K={K} should be divisible by BLOCK_ROWS={BLOCK_ROWS}, BLOCK_K={BLOCK_K}")
${hoisted}
    lhs = ${lhs}

    # lhs is (M, K): the [BLOCK_ROWS, BLOCK_K] tile of row block i at k-step k
    def lhs_map(i, k):
        return i, k

    # rhs is ${rhs_shape}: the k-step's ${rhs_what} slab, all columns
    def rhs_map(i, k):
        return ${rhs_index}

${maps}
    out = pl.pallas_call(
        _kernel,
        out_shape=[${out_shapes}],
        grid=(ROWS // BLOCK_ROWS, K // BLOCK_K),
        in_specs=[pl.BlockSpec((BLOCK_ROWS, BLOCK_K), lhs_map), pl.BlockSpec(${rhs_block}, rhs_map)${in_specs}],
        out_specs=[${out_specs}],
        scratch_shapes=[pltpu.VMEM((BLOCK_ROWS, ${n}), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
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


def _k_blocks(k: int) -> tuple[int, ...]:
    out = [b for b in (128, 256, 512, 1024, 2048, 4096) if b < k and k % b == 0]
    return (*out, k)


def build(
    program: Program, plan: RowPlan, sp: Split, row_blocks: tuple[int, ...], fused_parts: Any
) -> Template:
    """The template for a program `split` accepted; `fused_parts` renders the epilogue's row-tiled body."""
    eqns = program["equations"]
    names = program["input_names"]
    hoist = set(sp.chain) | set(_folded(eqns, sp))
    epi = [e for i, e in enumerate(eqns) if i != sp.dot and i not in hoist]
    dot_var = eqns[sp.dot]["outputs"][0]
    others = [n for n in names if n not in (sp.lhs, sp.rhs_root)]
    sub = {**program, "equations": epi}
    body = fused_parts(sub)
    chain_prog = {"equations": [eqns[i] for i in sp.chain]}
    hoisted = body_lines(chain_prog)
    rhs_var = eqns[sp.dot]["inputs"][1]
    hoisted_src = "\n".join(f"    {line}  # layout only" for line in hoisted)
    hoisted_src += f"\n    rhs = {rhs_var}" if hoisted else f"\n    rhs = {sp.rhs_root}"
    outs = [operand(o) for o in program["outputs"]]
    o_spec = program["out_specs"][0]
    maps, in_specs = [], []
    for n in others:
        s = program["inputs"][names.index(n)]
        rank = len(s["shape"])
        tiled = plan.input_axes[names.index(n)] is not None
        idx = ", ".join("i" if (tiled and d == 0) else "0" for d in range(rank)) + ("," if rank == 1 else "")
        what = "row block i" if tiled else "the whole array, fetched once"
        maps.append(
            f"    # {n} is {tuple(s['shape'])}: {what}\n    def {n}_map(i, k):\n        return {idx}\n"
        )
        dims = ["BLOCK_ROWS" if (tiled and d == 0) else str(x) for d, x in enumerate(s["shape"])]
        in_specs.append(f", pl.BlockSpec(({', '.join(dims)}{',' if rank == 1 else ''}), {n}_map)")
    rank = len(o_spec["shape"])
    o_idx = ", ".join("i" if d == 0 else "0" for d in range(rank)) + ("," if rank == 1 else "")
    maps.append(f"    # the output is {tuple(o_spec['shape'])}: row block i, resident across k\n"
                f"    def o0_map(i, k):\n        return {o_idx}\n")  # fmt: skip
    o_dims = ["BLOCK_ROWS" if d == 0 else str(x) for d, x in enumerate(o_spec["shape"])]
    rhs_block = "(BLOCK_K, N)" if sp.rhs_contract == 0 else "(N, BLOCK_K)"
    fixed = {
        "epi_args": ", ".join([dot_var, *others]),
        "body": body,
        "outs": "(" + ", ".join(outs) + ",)",
        "refs": ", ".join(["lhs_ref", "rhs_ref", *[f"{n}_ref" for n in others], "o0_ref"]),
        "dims": sp.dims,
        "dot_dtype": sp.dot_dtype,
        "epi_loads": ", ".join(["dot", *[f"{n}_ref[...]" for n in others]]),
        "stores": "        o0_ref[...] = outs[0].astype(o0_ref.dtype)",
        "args": ", ".join(names),
        "hoisted": hoisted_src,
        "lhs": sp.lhs,
        "rhs_shape": f"({sp.k}, {sp.n})" if sp.rhs_contract == 0 else f"({sp.n}, {sp.k})",
        "rhs_what": "[BLOCK_K, N]" if sp.rhs_contract == 0 else "[N, BLOCK_K]",
        "rhs_index": "k, 0" if sp.rhs_contract == 0 else "0, k",
        "rhs_block": rhs_block.replace("N", str(sp.n)),
        "maps": "\n".join(maps).rstrip("\n"),
        "in_specs": "".join(in_specs),
        "out_specs": f"pl.BlockSpec(({', '.join(o_dims)}{',' if rank == 1 else ''}), o0_map)",
        "out_shapes": f"jax.ShapeDtypeStruct({tuple(o_spec['shape'])}, jnp.{o_spec['dtype']})",
        "call_args": "".join(f", {n}" for n in others),
        "result": "out[0]",
        "rows": str(plan.rows),
        "k": str(sp.k),
        "n": str(sp.n),
    }
    k_blocks = _k_blocks(sp.k)
    item = 2 if "16" in program["inputs"][names.index(sp.lhs)]["dtype"] else 4
    other_bytes = sum(
        2 * _size(program["inputs"][names.index(n)]["shape"]) * 4 for n in others
    )  # upper bound: whole, f32

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bm, bk = int(c["block_rows"]), int(c["block_k"])
        return int(2 * item * (bm * bk + bk * sp.n) + 4 * bm * sp.n * 4 + other_bytes)

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        out = []
        if int(c["block_rows"]) not in row_blocks:
            out.append(f"block_rows={c['block_rows']} is not one of {list(row_blocks)}")
        if int(c["block_k"]) not in k_blocks:
            out.append(f"block_k={c['block_k']} is not one of {list(k_blocks)}")
        return out

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        bm, bk = int(c["block_rows"]), int(c["block_k"])
        steps = (plan.rows // bm) * (sp.k // bk)
        hbm = item * (plan.rows * sp.k + sp.k * sp.n * (plan.rows // bm) + plan.rows * sp.n)
        compute = 2 * plan.rows * sp.n * sp.k / (900e12 * min(bm, 256) / 256) * 1e6
        penalty = 1e6 if vmem(c, d) > 48 * MiB else 0.0
        return max(compute, hbm / 1.6e12 * 1e6) + 0.35 * steps + penalty

    fits = [
        (bm, bk)
        for bm in row_blocks
        for bk in k_blocks
        if bm <= 256 and bk <= 512 and vmem({"block_rows": bm, "block_k": bk}, {}) <= 16 * MiB
    ]
    bm0, bk0 = max(fits) if fits else (min(row_blocks), min(k_blocks))
    return Template(
        name="matmul",
        operators=("program",),
        source=SOURCE,
        tunables={"block_rows": row_blocks, "block_k": k_blocks},
        dims_of=lambda sizes: {"M": plan.rows, "K": sp.k, "N": sp.n},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial={"block_rows": bm0, "block_k": bk0},
        fixed=lambda op: fixed,
        constraints=(f"block_rows in {list(row_blocks)}", f"block_k in {list(k_blocks)} (divides K={sp.k})"),
        grid_axes=lambda c: ["rows", "k"],
        semantics=lambda c: ["parallel", "arbitrary"],
    )


def _size(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out
