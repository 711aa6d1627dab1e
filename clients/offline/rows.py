"""Which axis of every value in a traced program follows the output's rows (so the rows can be tiled).

The kernel grid tiles the output's leading axis (R rows). A program is row-separable when each output
row depends only on the same row of the row-carrying inputs (plus whole inputs, such as weights): the
row axis is followed forward through each equation, and any equation that would mix rows (a
reduction over rows, a gather, a contraction over rows) makes it fail. An input whose leading size
only happens to equal R (a [K, N] weight with K == R) is dropped from the row inputs and the walk is
retried. No tiling (one block holding everything) is always possible and is what `analyse` returns
when the rows cannot be separated.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field

from maxkernel.tpu_tools.problem.emit import CUMULATIVE, ELEMENTWISE, REDUCE, Program

Axis = int | None  # the row axis of a value, None when it does not depend on rows


@dataclass
class RowPlan:
    """Rows R of the output's axis 0; per input its row axis (None: passed whole); per value its row axis."""

    rows: int
    tiled: bool
    input_axes: list[Axis]
    out_axis: int = 0  # which axis of the outputs these rows are
    axes: dict[str, Axis] = field(default_factory=dict)
    offset_iotas: set[int] = field(default_factory=set)  # equation indices whose iota counts rows
    why: str = ""


class _Mixes(Exception):
    def __init__(self, why: str, culprit: str | None) -> None:
        super().__init__(why)
        self.culprit = culprit


def _t(text: str) -> tuple:
    v = ast.literal_eval(text)
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def _shape(e: dict, i: int = 0) -> list[int]:
    return e["out_specs"][i]["shape"]


def _rank0(name: str, specs: dict[str, list[int]]) -> bool:
    return name.startswith("lit:") or len(specs.get(name, [1])) == 0


def _conv_specs(text: str) -> tuple[tuple, tuple, tuple]:
    found = re.findall(r"(lhs_spec|rhs_spec|out_spec)=\(([^)]*)\)", text)
    got = {k: tuple(int(x) for x in v.split(",") if x.strip()) for k, v in found}
    return got.get("lhs_spec", ()), got.get("rhs_spec", ()), got.get("out_spec", ())


def _walk(program: Program, rows: int, seeds: list[Axis], out_axis: int = 0) -> RowPlan:
    axes: dict[str, Axis] = {}
    src: dict[str, set[str]] = {}
    specs: dict[str, list[int]] = {}
    for name, spec, ax in zip(program["input_names"], program["inputs"], seeds, strict=True):
        axes[name], specs[name] = ax, spec["shape"]
        src[name] = {name} if ax is not None else set()
    plan = RowPlan(rows=rows, tiled=True, input_axes=list(seeds), axes=axes, out_axis=out_axis)

    def ax_of(a: str) -> Axis:
        return None if a.startswith("lit:") else axes[a]

    for idx, e in enumerate(program["equations"]):
        prim, ins, p = e["primitive"], e["inputs"], e["params"]
        row_ins = [a for a in ins if ax_of(a) is not None]
        culprit = next((a for a in row_ins), None)
        origin = set().union(*(src.get(a, set()) for a in ins if not a.startswith("lit:")))

        def mixes(why: str, who: str | None = culprit, _prim: str = prim, _origin: set = origin) -> _Mixes:
            inputs = sorted(src.get(who or "", set()) or _origin, key=lambda s: int(s[1:]))
            return _Mixes(f"{_prim}: {why}", inputs[-1] if inputs else None)

        out: Axis = None
        shape = _shape(e)
        if not row_ins:
            if (
                prim == "broadcast_in_dim"
                and len(shape) > out_axis
                and shape[out_axis] == rows
                and out_axis not in _t(p["broadcast_dimensions"])
            ):
                out = out_axis  # the same value on every row: emitted at block size
            elif prim == "iota" and len(shape) > out_axis and shape[out_axis] == rows:
                out = out_axis
                if int(p["dimension"]) == out_axis:
                    plan.offset_iotas.add(idx)  # counts rows: offset by the block's first row
        elif prim in ELEMENTWISE:
            found = {ax_of(a) for a in row_ins}
            if len(found) != 1:
                raise mixes("operands carry rows on different axes")
            out = found.pop()
            whole = [a for a in ins if ax_of(a) is None and not _rank0(a, specs) and specs[a][out] != 1]
            if whole:
                raise mixes(f"{whole[0]} has all rows but is combined row by row")
        elif prim == "broadcast_in_dim":
            out = _t(p["broadcast_dimensions"])[axes[ins[0]]]
        elif prim == "reshape":
            old, a = specs[ins[0]], axes[ins[0]]
            before = math.prod(old[:a])
            out = next(
                (j for j in range(len(shape)) if math.prod(shape[:j]) == before and shape[j] == old[a]), None
            )
            if out is None:
                raise mixes("the reshape splits or merges the row axis")
        elif prim == "transpose":
            out = list(_t(p["permutation"])).index(axes[ins[0]])
        elif prim == "squeeze":
            dims, a = _t(p["dimensions"]), axes[ins[0]]
            if a in dims:
                raise mixes("squeezes the row axis")
            out = a - sum(d < a for d in dims)
        elif prim == "expand_dims":
            a = axes[ins[0]]
            for d in sorted(_t(p["dimensions"])):
                a = a + 1 if d <= a else a
            out = a
        elif prim in REDUCE or prim in ("argmax", "argmin"):
            dims, a = _t(p["axes"]), axes[ins[0]]
            if a in dims:
                raise mixes("reduces over rows")
            out = a - sum(d < a for d in dims)
        elif prim in CUMULATIVE:
            if int(p["axis"]) == axes[ins[0]]:
                raise mixes("accumulates along rows")
            out = axes[ins[0]]
        elif prim == "top_k":
            a = axes[ins[0]]
            if a == len(specs[ins[0]]) - 1:
                raise mixes("top_k along rows")
            out = a
        elif prim == "dot_general":
            (lc, rc), (lb, rb) = ast.literal_eval(p["dimension_numbers"])
            la, ra = ax_of(ins[0]), ax_of(ins[1])
            lrank, rrank = len(specs[ins[0]]), len(specs[ins[1]])
            lfree = [d for d in range(lrank) if d not in lc and d not in lb]
            rfree = [d for d in range(rrank) if d not in rc and d not in rb]
            if la is not None and ra is not None:
                if la in lb and ra in rb and lb.index(la) == rb.index(ra):
                    out = lb.index(la)
                else:
                    raise mixes("both operands carry rows, not as one batch axis", ins[1])
            elif la is not None:
                if la in lc or la in lb:
                    raise mixes("contracts over rows", ins[0])
                out = len(lb) + lfree.index(la)
            else:
                if ra in rc or ra in rb:
                    raise mixes("contracts over rows", ins[1])
                out = len(lb) + len(lfree) + rfree.index(ra)
        elif prim == "slice":
            a = axes[ins[0]]
            start, limit = _t(p["start_indices"]), _t(p["limit_indices"])
            strides = _t(p["strides"]) if p.get("strides", "None") != "None" else (1,) * len(start)
            if start[a] != 0 or limit[a] != specs[ins[0]][a] or strides[a] != 1:
                raise mixes("slices the rows")
            out = a
        elif prim == "concatenate":
            found = {ax_of(a) for a in ins}
            if len(found) != 1 or int(p["dimension"]) in found:
                raise mixes("concatenates across rows")
            out = found.pop()
        elif prim == "pad":
            a = axes[ins[0]]
            if tuple(_t(p["padding_config"])[a]) != (0, 0, 0) or ax_of(ins[1]) is not None:
                raise mixes("pads the rows")
            out = a
        elif prim == "rev":
            if axes[ins[0]] in _t(p["dimensions"]):
                raise mixes("reverses the rows")
            out = axes[ins[0]]
        elif prim == "reduce_window":
            a = axes[ins[0]]
            ones = all(_t(p[k])[a] == 1 for k in ("window_dimensions", "window_strides", "base_dilation"))
            if not ones or tuple(_t(p["padding"])[a]) != (0, 0) or ax_of(ins[1]) is not None:
                raise mixes("its window spans rows")
            out = a
        elif prim == "conv_general_dilated":
            lhs, _, outspec = _conv_specs(p["dimension_numbers"])
            if ax_of(ins[1]) is not None or not lhs or axes[ins[0]] != lhs[0]:
                raise mixes("rows are not the convolution's batch axis")
            out = outspec[0]
        else:
            raise mixes("mixes rows (no row rule for it)")
        for i, name in enumerate(e["outputs"]):
            axes[name] = out
            specs[name] = _shape(e, i)
            src[name] = origin if out is not None else set()
        if out is not None and _shape(e)[out] != rows:
            raise mixes(f"its row axis has size {_shape(e)[out]}, not {rows}")
    for o in program["outputs"]:
        if o.startswith("lit:") or axes[o] != out_axis:
            inputs = sorted(src.get(o, set()), key=lambda s: int(s[1:]))
            raise _Mixes(f"output {o} does not keep rows on axis {out_axis}", inputs[-1] if inputs else None)
    return plan


def analyse(program: Program, out_axis: int = 0) -> RowPlan:
    """The row plan of `program`: tiled over the outputs' axis `out_axis` when separable, else one whole
    block. Axis 1 is tried as a second grid axis (a [batch, seq, hidden] norm tiles batch and seq)."""
    outs = program["out_specs"]
    n = len(program["inputs"])
    whole = RowPlan(rows=1, tiled=False, input_axes=[None] * n, out_axis=out_axis)
    if not outs or any(len(o["shape"]) <= out_axis for o in outs):
        whole.why = "an output is a scalar" if out_axis == 0 else f"an output has no axis {out_axis}"
        return whole
    rows = outs[0]["shape"][out_axis]
    if any(o["shape"][out_axis] != rows for o in outs):
        whole.why = f"outputs disagree on their size along axis {out_axis}"
        return whole
    seeds: list[Axis] = [_seed(s["shape"], rows, out_axis) for s in program["inputs"]]
    names = program["input_names"]
    why, tried, budget = "", set(), [_MAX_WALKS]

    def search(seeds: list[Axis]) -> RowPlan | None:
        """The first walk that separates the rows, dropping guessed row inputs one at a time: the
        culprit's first, then the others from the last (a [N] bias with N == R is a guess to drop, not
        the activation it is added to)."""
        nonlocal why
        key = tuple(seeds)
        if key in tried or budget[0] <= 0 or not any(a is not None for a in seeds):
            return None
        tried.add(key)
        budget[0] -= 1
        try:
            return _walk(program, rows, seeds, out_axis)
        except _Mixes as e:
            why = why or str(e)
            culprit = e.culprit
            cands = [i for i, a in enumerate(seeds) if a is not None]
            first = (
                names.index(culprit) if culprit in names and seeds[names.index(culprit)] is not None else None
            )
            for drop in ([first] if first is not None else []) + [i for i in reversed(cands) if i != first]:
                found = search([None if i == drop else a for i, a in enumerate(seeds)])
                if found is not None:
                    return found
        return None

    plan = search(seeds)
    if plan is not None:
        return plan
    whole.rows = rows
    whole.why = why or "no input carries the output's rows"
    return whole


_MAX_WALKS = 64  # row walks per program: inputs are few, and each walk is one pass over the equations


def _seed(shape: list[int], rows: int, out_axis: int) -> Axis:
    """The axis an input's rows are first guessed on: the output's axis when its size there matches, or
    a vector's one axis (a per-channel [C] scale of an output tiled along its channels); the walk proves
    or drops each guess."""
    if len(shape) > out_axis and shape[out_axis] == rows:
        return out_axis
    if len(shape) == 1 and shape[0] == rows:
        return 0
    return None
