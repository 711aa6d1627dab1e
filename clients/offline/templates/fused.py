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

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, program_at, shape_source
from maxkernel.clients.offline.rows import RowPlan, analyse
from maxkernel.clients.offline.templates import scalars
from maxkernel.clients.offline.templates.base import MiB, Template, cheapest
from maxkernel.clients.offline.templates.op_families import f32_program
from maxkernel.clients.offline.templates.row_blocks import legal_blocks, nbytes, row_body, tiled_axes
from maxkernel.tpu_tools.problem.emit import Program, operand

SOURCE = '''"""${title} (offline template `${name}`), generated from the reference's traced program.

${about}

Shape-generic: every shape is read from the inputs when the kernel is traced (`sh`), the block sizes
were chosen for the target size (${target}) and clamp to smaller inputs, and a last block that runs
past the edge is partial: its rows are independent, and Pallas drops the out-of-range part on store.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
${block_consts}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _program(${args}, *, sh, ${tile_kw}):
    """The reference's equations on one block (b*: block sizes, r*: the block's first index)."""
${body}
    return ${outs}


def _kernel(${refs}, *, sh, ${block_kw}):
    outs = _program(${loads}, sh=sh, ${tile_call})
${stores}


def workload(${args}):
    sh = (${shapes})  # every input's shape: the kernel's shapes are written from these
${extents}
${maps}
    out = pl.pallas_call(
        functools.partial(_kernel, sh=sh, ${block_pass}),
        out_shape=[${out_shapes}],
        grid=(${grid}),
        in_specs=[${in_specs}],
        out_specs=[${out_specs}],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=(${semantics}), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_${name}",
    )(${call_args})
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
BLOCK_NAMES = ("block_rows", "block_axis1")  # the tunable of grid axis k (the outputs' axis k)
_INITIAL_VMEM = 24 * MiB  # the first proposal leaves room for the compiler's own scratch


def plans_of(program: Program, plan: RowPlan) -> list[RowPlan]:
    """The grid's axes: the outputs' rows, and their axis 1 as well when it tiles independently (a
    [batch, seq, hidden] program whose batch alone is too few, too large rows)."""
    if not plan.tiled:
        return []
    plans = [plan]
    if all(len(o["shape"]) >= 3 for o in program["out_specs"]):
        second = analyse(program, 1)
        names = set(plan.axes) & set(second.axes)
        clash = any(plan.axes[n] is not None and plan.axes[n] == second.axes[n] for n in names)
        if second.tiled and not clash:
            plans.append(second)
    return plans


def _index(
    rank: int, axes: Mapping[int, int], ngrid: int, perm: Sequence[int] | None = None
) -> tuple[str, str]:
    """(index-map args, its return value) for a block tiled on `axes` ({array axis: grid axis}); with
    `perm`, the block of the array whose axis d is the value's axis perm[d] (a layout folded in)."""
    args = ", ".join(f"i{k}" for k in range(max(ngrid, 1)))
    elems = [f"i{axes[d]}" if d in axes else "0" for d in range(rank)]
    elems = [elems[p] for p in perm] if perm is not None else elems
    idx = ", ".join(elems) + ("," if rank == 1 else "")
    return args, idx


def _block(
    rank: int, axes: Mapping[int, int], whole: Sequence[str], perm: Sequence[int] | None = None
) -> str:
    elems = [f"b{axes[d]}" if d in axes else whole[d] for d in range(rank)]
    return shape_source([elems[p] for p in perm] if perm is not None else elems)


FOLDED = "layout folded:"  # in a kernel whose BlockSpecs read or write a moved layout (templates/staged.py)


def layout_of(program: Program) -> tuple[dict[str, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """A stage's folded layout moves (templates/staged.py): per input, the perm that takes the array it is
    passed to the value the program reads (value axis d is array axis perm[d]); per output index, the perm
    that takes the value to the array it is returned as (array axis d is value axis perm[d])."""
    layout = program.get("layout") or {}
    ins = {n: tuple(p) for n, p in (layout.get("inputs") or {}).items()}
    outs = {int(k): tuple(p) for k, p in (layout.get("outputs") or {}).items()}
    return ins, outs


def _vmem_transpose(expr: str, perm: Sequence[int]) -> str:
    """`expr` transposed by `perm` in VMEM. A rank-3 move is written as the swaps Mosaic does cheaply, of
    the two major axes (pltpu.einshape) and of the two minor ones (jnp.swapaxes): 17p's norm kernel reads
    [c, i, j] blocks as [i, j, c] in 1107 us at full this way, in 3293 us through one jnp.transpose (llo,
    v6e: the MXU-free kernel turned compute-bound)."""
    perm = tuple(perm)
    if len(perm) != 3:
        return f"jnp.transpose({expr}, {perm})"
    swaps = {"01": (1, 0, 2), "12": (0, 2, 1)}
    paths, seen = [((0, 1, 2), [])], {(0, 1, 2)}
    while paths:  # the shortest chain of swaps: at most three
        at, path = paths.pop(0)
        if at == perm:
            break
        for name, s in swaps.items():
            nxt = tuple(at[d] for d in s)
            if nxt not in seen:
                seen.add(nxt)
                paths.append((nxt, [*path, name]))
    for name in path:
        expr = f'pltpu.einshape("abc->bac", {expr})' if name == "01" else f"jnp.swapaxes({expr}, 1, 2)"
    return expr


def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(range(len(perm)), key=lambda d: perm[d]))


def _source_parts(
    program: Program, plans: Sequence[RowPlan], sym: Symbolic, why: str, widen: bool = False
) -> dict[str, str]:
    names = program["input_names"]
    ins = program["inputs"]
    ngrid = len(plans)
    in_perms, out_perms = layout_of(program)
    body = row_body(program, plans, sym)
    outs = [operand(o) for o in program["outputs"]]
    n_out = len(outs)
    refs = [f"{n}_ref" for n in names] + [f"o{i}_ref" for i in range(n_out)]
    loads = [
        scalars.load(f"{n}_ref", s)
        if scalars.is_scalar(s)  # a 0-d input is one SMEM word (templates/scalars.py)
        else _vmem_transpose(f"{n}_ref[...]", in_perms[n])
        if n in in_perms
        else f"{n}_ref[...]"
        for n, s in zip(names, ins, strict=True)
    ]
    if widen:  # the body computes in f32 (op_families.f32_program): each bf16 input widened once here
        loads = [
            f"{a}.astype(jnp.float32)" if s["dtype"] == "bfloat16" else a
            for a, s in zip(loads, ins, strict=True)
        ]
    loads = ", ".join(loads)
    out_ranks = [len(s["shape"]) for s in program["out_specs"]]
    stores = "\n".join(
        f"    o{i}_ref[...] = jnp.transpose(outs[{i}], {out_perms[i]}).astype(o{i}_ref.dtype)"
        if i in out_perms
        else f"    o{i}_ref[...] = outs[{i}].astype(o{i}_ref.dtype)"
        + (".reshape(1, 1)  # a scalar output travels as a (1, 1) block" if not r else "")
        for i, r in enumerate(out_ranks)
    )
    maps, in_specs = [], []
    for i, (n, s) in enumerate(zip(names, ins, strict=True)):
        if scalars.is_scalar(s):
            maps.append(scalars.map_comment(n, s))
            in_specs.append(scalars.SMEM_SPEC)
            continue
        rank = len(s["shape"])
        axes = {p.input_axes[i]: k for k, p in enumerate(plans) if p.input_axes[i] is not None}
        perm = _inverse(in_perms[n]) if n in in_perms else None
        args, idx = _index(rank, axes, ngrid, perm)
        what = (
            "the block " + ", ".join(f"i{k} along axis {d}" for d, k in sorted(axes.items()))
            if axes
            else "the whole array, fetched once"
        )
        folded = f"; {FOLDED} passed as its transpose by {_inverse(in_perms[n])}" if perm else ""
        maps.append(
            f"    # {n} is {tuple(s['shape'])} at {sym.sizes[0]}: {what}{folded}\n    def {n}_map({args}):\n        return {idx}\n"
        )
        in_specs.append(
            f"pl.BlockSpec({_block(rank, axes, [f'sh[{i}][{d}]' for d in range(rank)], perm)}, {n}_map)"
        )
    out_specs, out_shapes = [], []
    out_axes = {p.out_axis: k for k, p in enumerate(plans)}  # the outputs' axis each grid axis tiles
    for i, s in enumerate(program["out_specs"]):
        args = ", ".join(f"i{k}" for k in range(max(ngrid, 1)))
        if not s["shape"]:
            maps.append(
                f"    # output {i} is a scalar, stored as (1, 1)\n    def o{i}_map({args}):\n        return 0, 0\n"
            )
            out_specs.append(f"pl.BlockSpec((1, 1), o{i}_map)")
            out_shapes.append(f"jax.ShapeDtypeStruct((1, 1), jnp.{s['dtype']})")
            continue
        rank = len(s["shape"])
        whole = sym.output_shape(i)
        perm = out_perms.get(i)
        _, idx = _index(rank, out_axes, ngrid, perm)
        folded = f"; {FOLDED} returned as its transpose by {perm}" if perm else ""
        maps.append(
            f"    # output {i} is {tuple(s['shape'])} at {sym.sizes[0]}{folded}\n    def o{i}_map({args}):\n        return {idx}\n"
        )
        out_specs.append(f"pl.BlockSpec({_block(rank, out_axes, whole, perm)}, o{i}_map)")
        phys = [whole[p] for p in perm] if perm else whole
        out_shapes.append(f"jax.ShapeDtypeStruct({shape_source(phys)}, jnp.{s['dtype']})")
    first = sym.output_shape(0) if program["out_specs"] and program["out_specs"][0]["shape"] else []
    extents = [
        f"    n{k} = {first[p.out_axis]}  # the outputs' axis {p.out_axis}\n"
        f"    b{k} = min({BLOCK_NAMES[p.out_axis].upper()}, n{k})"
        for k, p in enumerate(plans)
    ]
    consts = [
        f"{BLOCK_NAMES[p.out_axis].upper()} = ${{{BLOCK_NAMES[p.out_axis]}}}  # along the outputs' axis {p.out_axis}"
        for p in plans
    ]
    if not plans:
        consts = [f"BLOCK_ROWS = ${{block_rows}}  # unused: not tiled ({why}), one block holds everything"]
    return {
        "args": ", ".join(names),
        "call_args": ", ".join(
            scalars.arg(n, s) if scalars.is_scalar(s) else n for n, s in zip(names, ins, strict=True)
        ),
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
        "shapes": ", ".join(
            f"tuple({n}.shape[d] for d in {in_perms[n]})" if n in in_perms else f"{n}.shape" for n in names
        )
        + ("," if len(names) == 1 else ""),
        "extents": "\n".join(extents) if extents else "    # not tiled: one grid step",
        "block_consts": "\n".join(consts),
        "tile_kw": ", ".join(f"b{k}, r{k}" for k in range(ngrid)) or "_unused=None",
        "block_kw": ", ".join(f"b{k}" for k in range(ngrid)) or "_unused=None",
        "tile_call": ", ".join(f"b{k}=b{k}, r{k}=pl.program_id({k}) * b{k}" for k in range(ngrid)),
        "block_pass": ", ".join(f"b{k}=b{k}" for k in range(ngrid)),
        "grid": ", ".join(f"pl.cdiv(n{k}, b{k})" for k in range(ngrid)) + ("," if ngrid == 1 else "") or "1,",
        "semantics": ", ".join('"parallel"' for _ in range(ngrid)) + ("," if ngrid == 1 else "")
        or '"arbitrary",',
    }


def _result(ranks: list[int]) -> str:
    items = [f"out[{i}]" + ("" if r else ".reshape(())") for i, r in enumerate(ranks)]
    return items[0] if len(items) == 1 else "(" + ", ".join(items) + ")"


def _vmem_fn(program: Program, plans: Sequence[RowPlan], sym: Symbolic):
    """VMEM a config needs at the target size: blocks double-buffered, plus f32 temporaries."""
    at = sym.at(sym.target)
    eqn_shapes = sym.eqn_shapes_at(sym.target)
    ins = [
        (s, {p.input_axes[i]: k for k, p in enumerate(plans) if p.input_axes[i] is not None})
        for i, s in enumerate(at["inputs"])
    ]
    values = [
        (shape, tiled_axes(plans, name))
        for e, shapes in zip(program["equations"], eqn_shapes, strict=True)
        for name, shape in zip(e["outputs"], shapes, strict=True)
    ]

    keys = [BLOCK_NAMES[p.out_axis] for p in plans]  # grid axis k's tunable

    def blocked(shape: Sequence[int], axes: Mapping[int, int], c: Mapping[str, Any]) -> list[int]:
        return [min(int(c[keys[axes[d]]]), x) if d in axes else x for d, x in enumerate(shape)]

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        total = sum(2 * nbytes(blocked(s["shape"], ax, c), s["dtype"]) for s, ax in ins)
        outs = {p.out_axis: k for k, p in enumerate(plans)}
        total += sum(2 * nbytes(blocked(s["shape"], outs, c), s["dtype"]) for s in at["out_specs"])
        total += 3 * max([nbytes(blocked(sh, ax, c), "float32") for sh, ax in values] or [0])
        return int(total)

    return vmem


def _rows_whole_pays(program: Program) -> bool:
    """A row epilogue (a softmax, a max subtracted) whose output is the dot's whole [M, N] and which reshapes
    nothing keeps N whole in one kernel: tiling N would write y and read it back in a second pass over
    [M, N] (llo at full, v6e: 42k 762 us whole vs 841 tiled, 50k 774 vs 858). A reduced output (36k, 23k:
    the partials are all that leave) or a reshaped epilogue (GroupNorm's [rows, G, S]: 45k spilled at 512
    whole rows) tiles N."""
    dots = [i for i, e in enumerate(program["equations"]) if e["primitive"] == "dot_general"]
    if len(dots) != 1:
        return False
    after = program["equations"][dots[0] :]
    if any(e["primitive"] in ("reshape", "squeeze", "expand_dims") for e in after):
        return False
    dot_shape = after[0]["out_specs"][0]["shape"]
    return [s["shape"] for s in program["out_specs"]] == [dot_shape]


def build(program: Program, plan: RowPlan, kind: str, sym: Symbolic | None = None) -> Template:
    """The template of `program` in class `kind`: a k-tiled matmul when its dot allows, else the fused
    program tiled along the outputs' rows (and axis 1 when it tiles too), blocks sized for the target."""
    sym = sym or Symbolic(program)
    if sym.mismatch:
        raise ValueError(
            f"its traced program changes structure with size ({'; '.join(sym.mismatch.values())})"
        )
    plans = plans_of(program_at(program, sym.target), plan)
    if kind == "attention":
        from maxkernel.clients.offline.templates import flash_program, paged_attention

        paged = paged_attention.build(program, sym)  # k and v gathered by a page table: pages DMA'd in-kernel
        if paged is not None:
            return paged
        flash = flash_program.build(program, sym)
        if flash is not None:
            return flash
    if kind == "matmul":
        from maxkernel.clients.offline.templates import decay_attention, grouped_matmul, matmul_epilogue

        decay = decay_attention.build(program, sym)  # q·kᵀ · decay / row norm · v: score tiles, not [S, S]
        if decay is not None:
            return decay

        from maxkernel.clients.offline.templates import sparse_moe

        moe = sparse_moe.build(program, sym)  # every expert on every token, combined by a top-k one-hot
        if moe is not None:
            return moe
        gmm = grouped_matmul.build(program, sym)
        if gmm is not None:
            return gmm
        from maxkernel.clients.offline.templates import cross_entropy

        ce = cross_entropy.build(program, sym)
        if ce is not None:
            return ce

        from maxkernel.clients.offline.templates import matmul_rows

        rows = matmul_rows.build(program, plan, sym)  # an epilogue over whole rows: N tiled, partials
        sp = matmul_epilogue.split(program, plan)
        if rows is not None and (sp is None or not _rows_whole_pays(program)):
            return rows
        if sp is not None:
            return matmul_epilogue.build(program, plan, sp, sym)
        from maxkernel.clients.offline.templates import matmul_colstats

        # rows tied by a sum over them (train-mode BatchNorm): a k-tiled matmul, then passes over its result
        colstats = matmul_colstats.build(program, sym)
        if colstats is not None:
            return colstats
        from maxkernel.clients.offline.templates import mlp_chain, mlp_two_pass

        # one pass where the weights stream few times, two where h's round trip buys compute-bound tiles
        mlp = cheapest(mlp_chain.build(program, sym), mlp_two_pass.build(program, sym))
        if mlp is not None:
            return mlp
        from maxkernel.clients.offline.templates import batched_matmul

        bmm = batched_matmul.build(program, sym)
        if bmm is not None:
            return bmm
        from maxkernel.clients.offline.templates import stacked_matmul

        stacked = stacked_matmul.build(program, sym)
        if stacked is not None:
            return stacked
    if (
        not plans and plan.why
    ):  # rows mix (a batch norm): the outputs' axis 1 alone, when one block cannot fit
        alone = analyse(program_at(program, sym.target), 1)
        if alone.tiled and _vmem_fn(program, [], sym)({}, {}) > _INITIAL_VMEM:
            plans = [alone]
    if len(plans) == 2:  # a second grid axis only when the rows alone cannot fit at the target
        one = plans[:1]
        smallest = {BLOCK_NAMES[0]: min(legal_blocks(program, one, sym)[0])}
        if _vmem_fn(program, one, sym)(smallest, {}) <= _INITIAL_VMEM:
            plans = one
    wide = f32_program(program)  # no bf16 vector math on the target: the body in f32, each input widened once
    if wide is not None:
        program, sym = wide, Symbolic(wide)
    parts = _source_parts(program, plans, sym, plan.why or "rows are not separable", widen=wide is not None)
    if sym.unsolved:
        raise ValueError(
            "numbers that follow the size in no way it can write: " + "; ".join(sym.unsolved[:3])
        )
    at = sym.at(sym.target)
    blocks = legal_blocks(program, plans, sym) if plans else [(1,)]
    names = tuple(BLOCK_NAMES[p.out_axis] for p in plans) if plans else ("block_rows",)
    vmem = _vmem_fn(program, plans, sym)
    hbm = sum(nbytes(s["shape"], s["dtype"]) for s in at["inputs"] + at["out_specs"])
    extents = [at["out_specs"][0]["shape"][p.out_axis] for p in plans]

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        return [
            f"{n}={c[n]} is not one of the legal blocks {list(b)}"
            for n, b in zip(names, blocks, strict=True)
            if int(c[n]) not in b
        ]

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        steps = math.prod(-(-x // int(c[n])) for n, x in zip(names, extents, strict=False))
        penalty = 1e6 if vmem(c, d) > 48 * MiB else 0.0
        return hbm / 1.6e12 * 1e6 + 0.35 * steps + penalty

    configs = [dict(zip(names, vals, strict=True)) for vals in itertools.product(*blocks)]
    fitting = [c for c in configs if vmem(c, {}) <= _INITIAL_VMEM]
    # the first proposal: the largest fitting blocks (fewest steps), favouring the later axes
    initial = (
        max(fitting, key=lambda c: (math.prod(c.values()), list(c.values())[::-1]))
        if fitting
        else {n: min(b) for n, b in zip(names, blocks, strict=True)}
    )
    fixed = {
        **{k: v for k, v in parts.items() if k != "block_consts"},
        "name": kind,
        "title": TITLE[kind],
        "about": ABOUT[kind]
        + (
            " The body computes in f32 (the target has no bf16 vector math): each bf16 input is widened"
            " once on load and each output rounded once on store."
            if wide is not None
            else ""
        ),
        "target": f"{sym.target}: outputs {[tuple(s['shape']) for s in at['out_specs']]}",
    }
    return Template(
        name=kind,
        operators=("program",),
        source=SOURCE.replace("${block_consts}", parts.pop("block_consts")),
        tunables=dict(zip(names, blocks, strict=True)),
        dims_of=lambda sizes: {"R": plan.rows},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: fixed,
        constraints=tuple(
            f"{n} in {list(b)} (aligned at the target {sym.target})"
            for n, b in zip(names, blocks, strict=True)
        ),
        grid_axes=lambda c: ["rows", "axis1"][: len(plans)] or ["whole"],
        semantics=lambda c: ["parallel"] * len(plans) or ["arbitrary"],
    )
