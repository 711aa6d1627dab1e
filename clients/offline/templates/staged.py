"""A program cut at its batched contraction (clients/offline/stages.py): one kernel per stage, in one module.

Each stage (the projections that make the contraction's operands, the contraction, what follows it) is
written by the template its own class picks (model.py's `program_template`, passed in by the caller: no
import back up); the glue is plain JAX: a stage's call, the layout moves the next stage reads its values
through (a transpose to `[batch, M, K]` before the contraction, back to rows after it), the next call.
Tunables are every stage's, renamed `block_s<k>_*`; each kernel is checked by its own rules, VMEM is the
largest stage's, cost the stages' sum plus one HBM read and write per moved value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from string import Template as _StrTemplate
from typing import Any

from maxkernel.clients.offline.stages import Move, Stage, attention_cut, cut, held_cut, prep_cut
from maxkernel.clients.offline.templates.base import Part, Template
from maxkernel.clients.offline.templates.fused import BLOCK_NAMES, FOLDED
from maxkernel.clients.offline.templates.op_families import LAYOUT
from maxkernel.clients.offline.templates.row_blocks import itemsize
from maxkernel.clients.offline.templates.staging import stage as stage_body
from maxkernel.tpu_tools.problem.emit import (
    CONTROL,
    CUMULATIVE,
    ELEMENTWISE,
    EMITTABLE,
    PLAIN_ONLY,
    Program,
    top_k_in_kernel,
    var_dtypes,
)

HBM_BYTES_PER_US = 1.6e6  # v6e's ~1.6 TB/s: what a layout move between kernels costs, read and write

HEADER = '''"""A program in ${n} stages (offline template `staged`), written from the reference's traced program.

${stages}
${why} Shape-generic: each kernel reads its shapes from its inputs when traced; block sizes
were chosen for the target size (${target}).
"""

${imports}

${config_marker}${config_json}
'''


def _keys(k: int, tunables: Mapping[str, Any]) -> dict[str, str]:
    return {
        t: f"block_s{k}_{t.removeprefix('block_')}" if t.startswith("block") else f"s{k}_{t}"
        for t in tunables
    }


@dataclass(frozen=True)
class Written:
    """A stage as the module writes it: its template, dims, and which of the cut's layout moves the glue
    still does (the others are folded into a kernel's BlockSpecs: fused.layout_of)."""

    stage: Stage
    template: Template
    dims: dict[str, int]
    moves: tuple[Move, ...]  # done by the glue before the stage
    args: tuple[str, ...]  # the glue's values the stage is called with
    outputs: tuple[str, ...]  # the glue's names for what it returns
    lines: tuple[str, ...] = ()  # a glue stage's plain-JAX lines (its template is None)


def _call(k: int, w: Written) -> str:
    """The glue's lines for stage `k`: its moves, its call, its outputs' unit axes dropped (a glue stage:
    its own lines)."""
    st = w.stage
    if w.template is None:
        return "".join(
            f"    {line}  # glue\n" if i == 0 else f"    {line}\n" for i, line in enumerate(w.lines)
        )
    lines = [
        f"    {m.out} = jnp.transpose({m.src}, {m.perm})  # layout move: {_ROLE.get(st.role, 'the ' + st.role)} kernel's blocks\n"
        for m in w.moves
    ]
    outs = list(w.outputs)
    got = [f"{o}_u" if i in st.unit else o for i, o in enumerate(outs)]
    lhs = got[0] if len(got) == 1 else ", ".join(got)
    lines.append(
        f"    {lhs} = s{k}_workload({', '.join(w.args)})  # {_ROLE.get(st.role, 'the ' + st.role)} kernel\n"
    )
    lines += [f"    {outs[i]} = {got[i]}.reshape({got[i]}.shape[:-2])\n" for i in st.unit]
    return "".join(lines)


def _about(k: int, st: Stage, t: Template | None) -> str:
    if t is None:
        ops = sorted({e["primitive"] for e in st.program["equations"]})
        if st.role == "held":
            return (
                f"Stage {k}, left to XLA in plain JAX ({', '.join(ops)}: no Pallas TPU kernel body lowers it "
                f"as traced) -> {', '.join(st.outputs)}."
            )
        return f"Stage {k}, glue in plain JAX ({', '.join(ops)}: XLA fuses them) -> {', '.join(st.outputs)}."
    ops = sorted({e["primitive"] for e in st.program["equations"]} - ELEMENTWISE - LAYOUT) or ["elementwise"]
    who = f"{_ROLE[st.role]} kernel" if st.role in _ROLE else f"the {st.role}"
    return f"Stage {k}, {who} (`{t.name}` template: {', '.join(ops)}) -> {', '.join(st.outputs)}."


def _glue_us(w: Written, target: str) -> float:
    """A glue stage: one HBM read of what it reads and one write of what it returns, at the target size."""
    program = w.stage.program
    v = (program.get("variants") or {}).get(target) or {}
    specs = (v.get("inputs") or program["inputs"]) + (v.get("out_specs") or program["out_specs"])
    return sum(math.prod(s["shape"]) * itemsize(s["dtype"]) for s in specs) / HBM_BYTES_PER_US


def _move_us(w: Written, target: str) -> float:
    """One HBM read and write of each value the glue moves before the stage, at the target size."""
    program = w.stage.program
    specs = (program.get("variants") or {}).get(target, {}).get("inputs") or program["inputs"]
    names = program["input_names"]
    moved = {m.out for m in w.moves}
    return sum(
        2 * math.prod(s["shape"]) * itemsize(s["dtype"]) / HBM_BYTES_PER_US
        for n, s in zip(names, specs, strict=True)
        if n in moved
    )


WHY_CONTRACTION = """Values between stages go to HBM (they would whatever wrote them: the contraction needs all of both
operands for every output block); the glue moves their layout in plain JAX where the next kernel reads
them otherwise."""
WHY_HELD = """Values between stages go to HBM: the stages left to XLA are the ops no Pallas TPU kernel body lowers as
traced, and the elementwise ops XLA fuses into them."""
_ROLE = {"kernel": "a", "held": "the held op's"}  # how the module's comments name a stage's kernel


def compose(
    program: Program, written: Sequence[Written], target: str, why: str = WHY_CONTRACTION
) -> Template:
    """One template of every stage (see the module docstring)."""
    stages = [w.stage for w in written]
    kernels = [(k, w) for k, w in enumerate(written, 1) if w.template is not None]
    built = [(w.template, w.dims) for _, w in kernels]
    keys = [_keys(k, w.template.tunables) for k, w in kernels]
    bodies, imports = [], ["import jax.numpy as jnp"]
    for (k, w), ks in zip(kernels, keys, strict=True):
        body, more = stage_body(w.template, f"s{k}", ks)
        bodies.append(body)
        imports += more
    outs = list(program["outputs"])
    shapes = ""
    if len(kernels) < len(written):  # glue: lax calls written from the input shapes (dims.py's `sh`)
        imports.append("from jax import lax")
        shapes = f"    sh = tuple(jnp.shape(a) for a in ({', '.join(program['input_names'])},))\n"
    glue = (
        f"\n\ndef workload({', '.join(program['input_names'])}):\n"
        '    """The reference\'s signature: each stage\'s kernel in turn, layout moves between them."""\n'
        + shapes
        + "".join(_call(k, w) for k, w in enumerate(written, 1))
        + f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}\n"
    )
    fill = {
        "n": str(len(stages)),
        "stages": "\n".join(_about(k, w.stage, w.template) for k, w in enumerate(written, 1)),
        "target": target,
        "why": why,
        "imports": "\n".join(dict.fromkeys(imports)),
    }
    source = _StrTemplate(HEADER).safe_substitute(fill) + "".join(bodies) + glue
    moves_us = sum(_move_us(w, target) for w in written) + sum(
        _glue_us(w, target) for w in written if w.template is None
    )

    def parts(c: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{t: c[new] for t, new in ks.items() if new in c} for ks in keys]

    def each(
        fn: Callable[[Template, dict[str, Any], dict[str, int]], Any], c: Mapping[str, Any]
    ) -> list[Any]:
        return [fn(t, part, dims) for (t, dims), part in zip(built, parts(c), strict=True)]

    tunables, initial, constraints = {}, {}, []
    for (k, _), (t, _), ks in zip(kernels, built, keys, strict=True):
        tunables.update({ks[n]: v for n, v in t.tunables.items()})
        initial.update({ks[n]: v for n, v in t.initial.items()})
        constraints += [f"stage {k}: {c}" for c in t.constraints]
    return Template(
        name="staged",
        operators=("program",),
        source=source,
        tunables=tunables,
        dims_of=built[0][0].dims_of,
        problems=lambda c, d: [
            f"stage {k}: {p}"
            for (k, _), ps in zip(kernels, each(lambda t, a, dd: t.problems(a, dd), c), strict=True)
            for p in ps
        ],
        vmem_bytes=lambda c, d: max(each(lambda t, a, dd: t.vmem_bytes(a, dd), c)),
        cost_us=lambda c, d: sum(each(lambda t, a, dd: t.cost_us(a, dd), c)) + moves_us,
        initial=initial,
        fixed=lambda op: {},
        constraints=tuple(constraints),
        grid_axes=lambda c: [
            f"s{k}_{a}"
            for (k, _), (t, _), a_ in zip(kernels, built, parts(c), strict=True)
            for a in t.grid_axes(a_)
        ],
        semantics=lambda c: [s for (t, _), a in zip(built, parts(c), strict=True) for s in t.semantics(a)],
        parts=tuple(Part(t, ks, dims) for (t, dims), ks in zip(built, keys, strict=True)),
    )


def _folded(t: Template) -> bool:
    """Whether the stage's template wrote the layout its program asked for (only the fused row template
    reads `layout`; any other that serves the stage leaves the moves to the glue)."""
    try:
        return FOLDED in t.render(t.initial, "program")
    except ValueError:
        return False


def _write(
    stage: Stage, stage_template, layout: dict[str, Any]
) -> tuple[Template, str, dict[str, int], bool]:
    """(template, target, dims, whether `layout` was folded in) of one stage; without the layout when the
    template that serves the stage cannot fold it."""
    if any(layout.values()):
        try:
            t, at, dims = stage_template({**stage.program, "layout": layout})
        except ValueError:
            t = None
        if t is not None and _folded(t):
            return t, at, dims, True
    t, at, dims = stage_template(stage.program)
    return t, at, dims, False


def build(program: Program, stage_template) -> tuple[Template, str, dict[str, int]] | None:
    """(the template, its target size, its dims) of a program cut at its batched contraction; None when
    it has none; ValueError when a stage has no template. `stage_template(program)` writes one stage
    (ValueError when none fits). A layout move is folded into the kernel on either side of it where that
    kernel's template can read or write the moved layout (the glue does it otherwise)."""
    stages = cut(program)
    if stages is None:
        return None
    by_role = {s.role: s for s in stages}
    pivot = by_role["pivot"]
    later = {a for s in stages if s.role == "tail" for a in s.program["input_names"]} | set(
        program["outputs"]
    )
    written, target, folded_src = [], None, {}
    for k, st in enumerate(stages, 1):
        moves, args, outs = list(st.moves), list(st.program["input_names"]), list(st.outputs)
        layout: dict[str, Any] = {"inputs": {}, "outputs": {}}
        if st.role == "head":  # the pivot's moves of its outputs: written moved by the head's kernel
            for m in pivot.moves:
                i = outs.index(m.src) if m.src in outs else -1
                if i >= 0 and i not in st.unit and m.src not in later:
                    layout["outputs"][i] = list(m.perm)
        if st.role == "tail":  # its moves of the pivot's output: read through its BlockSpecs
            for m in st.moves:
                layout["inputs"][m.out] = list(m.perm)
        try:
            t, at, dims, folded = _write(st, stage_template, layout)
        except ValueError as e:
            raise ValueError(f"stage {k} ({st.role}): {e}") from None
        if folded and st.role == "head":
            for i, perm in layout["outputs"].items():
                m = next(m for m in pivot.moves if m.src == outs[i] and list(m.perm) == perm)
                folded_src[m.out] = True
                outs[i] = m.out
        if folded and st.role == "tail":
            args = [next((m.src for m in st.moves if m.out == a), a) for a in args]
            moves = []
        moves = [m for m in moves if m.out not in folded_src]
        if dict(t.tunables) == {"block_rows": (1,)}:  # no better than the whole program in one block
            raise ValueError(f"stage {k} ({st.role}) would be one untiled block too")
        if target not in (None, at):
            raise ValueError(f"its stages target different sizes ({target}, {at})")
        target = at
        written.append(Written(st, t, dims, tuple(moves), tuple(args), tuple(outs)))
    return compose(program, written, target), target, written[0].dims


def _is_flash(stage_template):
    def check(sub: Program) -> bool:
        try:
            t, _, _ = stage_template(sub)
        except ValueError:
            return False
        return t.name == "flash_program"

    return check


def build_attention(program: Program, stage_template) -> tuple[Template, str, dict[str, int]] | None:
    """(template, target, dims) of an attention block with its projections, every contraction a kernel
    (stages.attention_cut: the attention a flash kernel, each other dot a matmul kernel, the rest glue in
    plain JAX written from the input shapes); None when the program is not one; ValueError when a stage
    has no template or the glue would hold a size no trace explains."""
    stages = attention_cut(program, _is_flash(stage_template))
    return None if stages is None else _build_cut(program, stages, stage_template)


def build_prep(program: Program, stage_template) -> tuple[Template, str, dict[str, int]] | None:
    """(template, target, dims) of a program whose contraction reads a value made from its inputs alone
    (stages.prep_cut: a transposed conv's dilated input, 28k): that preparation is glue in plain JAX,
    the rest the template its own class picks; None when the program is not one; ValueError as above."""
    from maxkernel.clients.offline.strided_scatter import as_interior_pad

    program = as_interior_pad(program) or program  # zeros scattered at a stride: one interior pad
    stages = prep_cut(program)
    return None if stages is None else _build_cut(program, stages, stage_template)


def _build_cut(
    program: Program, stages: Sequence[Stage], stage_template, why: str = WHY_CONTRACTION
) -> tuple[Template, str, dict[str, int]]:
    """Each stage written: glue by emit.body_lines with the whole program's sizes, a kernel stage by the
    template `stage_template` picks for it. A `held` stage (equations no Pallas body writes as traced) is a
    kernel where a template of its own takes it whole (a scan's), else glue. A `kernel` stage of layout ops
    alone is glue (a kernel would only copy), and so is one of elementwise ops on values only XLA's glue
    reads or made (a cast or an index wrap before a scatter, a negation after a sort): XLA fuses them into
    its own loop where a kernel would add an HBM round trip."""
    from maxkernel.clients.offline.dims import Symbolic
    from maxkernel.tpu_tools.problem.emit import body_lines

    sym = Symbolic(program)
    chosen: dict[int, tuple[Template, str, dict[str, int]]] = {}
    for k, st in enumerate(stages):
        if st.role == "held":
            try:
                t, at, dims = stage_template(st.program)
            except ValueError:
                continue
            if not set(t.tunables) <= set(BLOCK_NAMES):  # the generic fused body would write it as traced
                chosen[k] = (t, at, dims)
    glue = {k for k, st in enumerate(stages) if st.role in ("glue", "held") and k not in chosen}
    readers = {
        o: [j for j, s in enumerate(stages) if o in s.program["input_names"]]
        for s in stages
        for o in s.outputs
    }
    for k, st in enumerate(stages):
        if st.role != "kernel":
            continue
        made_by_glue = any(a in stages[j].outputs for j in glue for a in st.program["input_names"])
        read_by_glue = all(
            o not in program["outputs"] and readers[o] and set(readers[o]) <= glue for o in st.outputs
        )
        if _layout_only(st.program) or (made_by_glue or read_by_glue) and _elementwise_only(st.program):
            glue.add(k)
    written, target = [], None
    for k, st in enumerate(stages):
        if k in glue:
            lines = tuple(body_lines(st.program, sym=sym, mosaic=False))
            if sym.unsolved:
                raise ValueError(
                    f"stage {k + 1} (glue): sizes no trace explains: {'; '.join(sym.unsolved[:3])}"
                )
            written.append(Written(st, None, {}, (), tuple(st.program["input_names"]), st.outputs, lines))
            continue
        if k in chosen:
            t, at, dims = chosen[k]
        else:
            try:
                t, at, dims = stage_template(st.program)
            except ValueError as e:
                raise ValueError(f"stage {k + 1} ({st.role}): {e}") from None
        if dict(t.tunables) == {"block_rows": (1,)}:
            raise ValueError(f"stage {k + 1} ({st.role}) would be one untiled block")
        if target not in (None, at):
            raise ValueError(f"its stages target different sizes ({target}, {at})")
        target = at
        written.append(Written(st, t, dims, (), tuple(st.program["input_names"]), st.outputs))
    first = next((w for w in written if w.template is not None), None)
    if first is None:
        raise ValueError("no stage is left for a kernel: every equation is glue")
    return compose(program, written, target, why), target, first.dims


def _elementwise_only(program: Program) -> bool:
    return all(e["primitive"] in ELEMENTWISE | LAYOUT | NO_WORK for e in program["equations"])


def _layout_only(program: Program) -> bool:
    """Whether a stage only moves, casts or makes index values (no arithmetic a kernel would carry)."""
    return all(e["primitive"] in LAYOUT | NO_WORK for e in program["equations"])


NO_WORK = {"convert_element_type", "copy", "copy_p", "stop_gradient", "iota", "transpose", "slice", "concatenate",
           "pad", "rev"}  # fmt: skip


def unlowerable(program: Program) -> Callable[[Mapping[str, Any]], bool]:
    """held_cut's predicate: an equation no Pallas TPU kernel body lowers as traced (sort, scatter, control
    flow, a top_k too wide for max-and-mask rounds, a scan: the scan family's template takes one alone)."""
    dtypes = var_dtypes(program)
    bad = set(program.get("unrenderable") or ())

    def held(e: Mapping[str, Any]) -> bool:
        prim = e["primitive"]
        if prim == "top_k":
            return not top_k_in_kernel(e, dtypes.get(e["inputs"][0], ""))
        return prim in PLAIN_ONLY | CONTROL | CUMULATIVE or prim not in EMITTABLE or prim in bad

    return held


def build_held(program: Program, stage_template) -> tuple[Template, str, dict[str, int]] | None:
    """(template, target, dims) of a program holding equations no Pallas TPU body lowers as traced
    (stages.held_cut): the rest in kernels by the templates their classes pick, each held stage a kernel
    where a family template takes it whole (a lone cumsum), else glue in plain JAX that XLA runs beside
    the kernels; None when nothing is held (or the program is itself a held stage); ValueError when a
    kernel stage has no template or no stage is left for a kernel."""
    if program.get("held_stage"):
        return None  # a held stage asking for a template of its own: never cut again
    stages = held_cut(program, unlowerable(program))
    if stages is None:
        return None
    stages = [
        Stage(s.role, {**s.program, "held_stage": True}, s.moves, s.outputs, s.unit)
        if s.role == "held"
        else s
        for s in stages
    ]
    return _build_cut(program, stages, stage_template, WHY_HELD)
