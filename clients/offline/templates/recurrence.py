"""Recurrence: a `lax.scan` over time whose body is elementwise with one carry (an RG-LRU, an EMA, any
linear or gated recurrence), with the elementwise program around it, as one Pallas kernel.

The traced program is read as a frame [batch..., T, W]: the scan runs over T with the carry [batch..., W],
and its scanned inputs are time-major views (a transpose) of frame values the program computes
elementwise (the prologue); its per-step outputs go back to the frame the same way and may feed more
elementwise ops (the epilogue). The kernel's grid walks (batch..., W blocks, T chunks), the T chunks last
and "arbitrary": each step computes the prologue on its [1, block_t, block_w] block, runs the body
`block_t` times in order over the block's rows (time on sublanes, width on lanes) with the carry in a VMEM
scratch that survives across chunks (set from the program's initial value at the first chunk: a constant
or an input), then runs the epilogue and stores the outputs. Every equation is the reference's own,
re-emitted on block values, so the numerics follow the reference step by step.

The body may read carry-shaped inputs (loop-invariant operands), loaded once per block before the loop.
Refused, with the reason: a reverse scan, several carries, other loop-invariant operands, a body
that is not elementwise, a scanned input that is not a time-major view of a frame value, a carry init
that is computed, ops around the scan that mix rows (reductions, slices along the frame).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, program_at, shape_source
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.row_blocks import block_align, itemsize, nbytes
from maxkernel.tpu_tools.problem.emit import ELEMENTWISE, Program, body_lines, operand

FRAME_OPS = {"broadcast_in_dim", "transpose", "squeeze", "expand_dims", "reshape", "iota"}
_INITIAL_VMEM = 24 * MiB  # the first proposal leaves room for the compiler's own scratch
_MAX_VMEM = 48 * MiB
UNROLL = 8  # body steps per loop iteration: one sublane tile of rows

SOURCE = '''"""Recurrence (offline template `recurrence`), generated from the reference's traced program.

A lax.scan over time with an elementwise body and one carry, with the elementwise ops around it. The
frame is [batch..., T, W] (${frame} at ${target}). The grid walks (batch..., W blocks, T chunks), T last
and "arbitrary": each step computes the prologue on its block, runs the body over the block's rows in
order (time on sublanes, width on lanes) with the carry in a VMEM scratch kept across T chunks (set at
the first chunk from ${init_what}), then the epilogue, and stores the outputs.

Shape-generic: every shape is read from the inputs when the kernel is traced (`sh`); the block sizes were
chosen for the target size and clamp to smaller inputs (a dim they do not divide is taken whole).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_T = ${block_t}  # time steps per grid step (sublanes)
BLOCK_W = ${block_w}  # width per grid step (lanes)
UNROLL = ${unroll}  # body steps per loop iteration
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _kernel(${refs}, *, sh, ${block_kw}):
${firsts}

    @pl.when(pl.program_id(${t_grid}) == 0)
    def _init():  # the scan's initial carry, at the first T chunk of each (batch, W) block
${init}

${loads}
    # the prologue: the reference's equations on this block
${prologue}
${xs_stores}
${consts}
    def _step(t, ${carry}):  # one scan step: row t of this chunk
${step}

    h_ref[...] = lax.fori_loop(0, ${bt}, _step, h_ref[...], unroll=min(UNROLL, ${bt}))
${epilogue}
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
        scratch_shapes=[${scratch}],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=(${semantics}), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        interpret=False,
        name="offline_recurrence",
    )(${args})
    return ${result}
'''


@dataclass
class Recurrence:
    """What the program is, read as a frame: the scan, its frame values, and every value's frame axes."""

    scan: dict
    body: dict
    frame: list[int]  # [batch..., T, W] at the target
    xs: list[str]  # per scanned input, its frame value
    ys: dict[str, str]  # per-step output (body name) -> the frame value it becomes (program name)
    init: tuple[str, str]  # ("literal", source) | ("input", name)
    consts: list[str]  # carry-shaped inputs the body reads at every step
    carry_out: str | None  # the final carry, when the program returns it
    index: int  # the scan's equation index
    prologue: list[int]  # equation indices, in order
    epilogue: list[int]
    maps: dict[str, list[int | None]]  # value -> frame axis of each of its axes (None: a size-1 axis)


def _t(text: str) -> tuple:
    v = ast.literal_eval(text)
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def recognise(program: Program) -> Recurrence:
    """The program as a recurrence on a frame; ValueError says why it is not one this template writes.
    Read at the target size, where a batch of 1 or equal sizes do not make coincidences."""
    scans = [i for i, e in enumerate(program["equations"]) if e["primitive"] == "scan"]
    if len(scans) != 1:
        raise ValueError(f"{len(scans)} scans (the recurrence template writes one)")
    eqns = program["equations"]
    si = scans[0]
    scan = eqns[si]
    p = scan["params"]
    if p.get("reverse", "False") != "False":
        raise ValueError("a reverse scan")
    if int(p["num_carry"]) != 1:
        raise ValueError(f"a scan with {p['num_carry']} carries (the template carries one)")
    (body,) = scan["subprograms"]
    bad = sorted({e["primitive"] for e in body["equations"]} - ELEMENTWISE)
    if bad:
        raise ValueError(f"a scan body that is not elementwise ({', '.join(bad)})")
    if any(o.startswith("lit:") for o in body["outputs"]):
        raise ValueError("a scan body that returns a literal")
    carry_shape = scan["out_specs"][0]["shape"]
    if not carry_shape:
        raise ValueError("a scalar carry (no width to put on lanes)")
    length = int(p["length"])
    frame = [*carry_shape[:-1], length, carry_shape[-1]]
    rank = len(frame)
    perm = (rank - 2, *range(rank - 2), rank - 1)  # frame -> the scan's time-major layout
    inverse = tuple(perm.index(k) for k in range(rank))
    producer = {o: i for i, e in enumerate(eqns) for o in e["outputs"]}
    consumers: dict[str, list[int]] = {}
    for i, e in enumerate(eqns):
        for a in e["inputs"]:
            consumers.setdefault(a, []).append(i)
    skip = {si}
    nc = int(p["num_consts"])
    shapes = {n: s["shape"] for n, s in zip(program["input_names"], program["inputs"], strict=True)}
    consts = scan["inputs"][:nc]  # loop-invariant operands: the body reads them by their outer names
    for c in consts:
        if shapes.get(c) != carry_shape:
            raise ValueError(f"a loop-invariant operand {c} of the scan that is not a carry-shaped input")

    def frame_of(name: str) -> str:
        """The frame value a scanned input is a time-major view of."""
        if perm == tuple(range(rank)):
            return name
        j = producer.get(name)
        e = eqns[j] if j is not None else None
        if e is None or e["primitive"] != "transpose" or _t(e["params"]["permutation"]) != perm:
            raise ValueError(f"scanned input {name} is not a time-major view of a [batch..., T, W] value")
        if len(consumers.get(name, [])) == 1:
            skip.add(j)
        return e["inputs"][0]

    init_name, *xs_names = scan["inputs"][nc:]
    xs = [frame_of(n) for n in xs_names]
    ys: dict[str, str] = {}
    outs = program["outputs"]
    for k, y in enumerate(scan["outputs"][1:]):
        body_y = body["outputs"][1 + k]
        users = consumers.get(y, [])
        if perm == tuple(range(rank)):
            ys[body_y] = y
            continue
        if y in outs:
            raise ValueError("the program returns the scan's time-major outputs")
        for j in users:
            e = eqns[j]
            if e["primitive"] != "transpose" or _t(e["params"]["permutation"]) != inverse:
                raise ValueError(f"the scan's output {y} is used other than transposed back to the frame")
            if body_y in ys:  # a second transpose of the same output: the same frame value
                raise ValueError(f"the scan's output {y} is transposed back twice")
            ys[body_y] = e["outputs"][0]
            skip.add(j)
    carry_out = scan["outputs"][0] if scan["outputs"][0] in outs else None
    if carry_out is not None and len(carry_shape) > 1 and carry_shape[-2] != 1:
        raise ValueError("the program returns the final carry with a batch axis on sublanes")
    # the carry's initial value: a constant broadcast, or an input as it is
    if init_name in program["input_names"]:
        init = ("input", init_name)
    else:
        e = eqns[producer[init_name]] if init_name in producer else None
        if e is None or e["primitive"] != "broadcast_in_dim" or not e["inputs"][0].startswith("lit:"):
            raise ValueError(
                "the carry's initial value is computed (the template takes a constant or an input)"
            )
        init = ("literal", operand(e["inputs"][0]))
    maps = _frame_maps(program, frame, xs, list(ys.values()), skip, carry_out)
    want = [*range(rank - 2), rank - 1]  # a carry-shaped input: its batch axes and W
    for name in consts + ([init[1]] if init[0] == "input" else []):
        if maps.setdefault(name, want) != want:
            raise ValueError(f"the carry-shaped input {name} is also used with other axes")
    after = _downstream(eqns, si)
    live = [i for i, e in enumerate(eqns) if i not in skip and e["outputs"] and e["outputs"][0] in maps]
    return Recurrence(
        scan=scan,
        body=body,
        frame=frame,
        xs=xs,
        ys=ys,
        init=init,
        consts=consts,
        carry_out=carry_out,
        index=si,
        prologue=[i for i in live if i not in after],
        epilogue=[i for i in live if i in after],
        maps=maps,
    )


def _downstream(eqns: Sequence[Mapping[str, Any]], start: int) -> set[int]:
    live = set(eqns[start]["outputs"])
    hits = set()
    for i in range(start + 1, len(eqns)):
        if live & set(eqns[i]["inputs"]):
            live |= set(eqns[i]["outputs"])
            hits.add(i)
    return hits


def _frame_maps(
    program: Program, frame: list[int], xs: list[str], ys: list[str], skip: set[int], carry_out: str | None
) -> dict[str, list[int | None]]:
    """Each live value's frame axis per axis, walked back from the frame values (the scanned inputs and
    the frame-shaped outputs): an axis is a frame axis, or a size-1 axis that broadcasts along one."""
    eqns = program["equations"]
    rank = len(frame)
    ident = list(range(rank))
    maps: dict[str, list[int | None]] = {}
    shapes = {n: s["shape"] for n, s in zip(program["input_names"], program["inputs"], strict=True)}
    for e in eqns:
        for o, s in zip(e["outputs"], e["out_specs"], strict=True):
            shapes[o] = s["shape"]

    def put(name: str, m: list[int | None]) -> None:
        if name.startswith("lit:"):
            return
        if len(m) != len(shapes[name]):
            raise ValueError(f"{name}: rank {len(shapes[name])} does not follow the frame")
        for d, a in enumerate(m):
            if a is None and shapes[name][d] != 1:
                raise ValueError(f"{name} has an axis of size {shapes[name][d]} that is not the frame's")
            if a is not None and shapes[name][d] not in (frame[a], 1):
                raise ValueError(f"{name}'s axis {d} has size {shapes[name][d]}, not the frame's {frame[a]}")
        m = [a if a is None or shapes[name][d] == frame[a] else None for d, a in enumerate(m)]
        old = maps.setdefault(name, m)
        if old != m:
            raise ValueError(f"{name} is used with different frame axes ({old} and {m})")

    for name in xs:
        put(name, ident)
    for o in program["outputs"]:
        if o == carry_out:
            continue
        if o.startswith("lit:") or shapes[o] != frame:
            raise ValueError(f"output {o} is not frame-shaped {tuple(frame)}")
        put(o, ident)
    for y in ys:
        if shapes[y] != frame:
            raise ValueError(f"the scan's output {y} is not frame-shaped")
    for i in range(len(eqns) - 1, -1, -1):
        e = eqns[i]
        if i in skip or not e["outputs"] or e["outputs"][0] not in maps:
            continue
        prim, ins, par = e["primitive"], e["inputs"], e["params"]
        m = maps[e["outputs"][0]]
        out = shapes[e["outputs"][0]]
        if prim not in ELEMENTWISE and prim not in FRAME_OPS:
            raise ValueError(f"{prim} around the scan (the template re-emits elementwise ops)")
        if e["outputs"][0] in ys:
            continue  # written by the loop
        if prim in ELEMENTWISE:
            for a in ins:
                if not a.startswith("lit:") and shapes[a]:
                    put(a, [m[d] if shapes[a][d] == out[d] else None for d in range(len(out))])
        elif prim == "broadcast_in_dim" and not ins[0].startswith("lit:"):
            dims = _t(par["broadcast_dimensions"]) if par["broadcast_dimensions"] != "()" else ()
            put(ins[0], [m[b] if shapes[ins[0]][k] == out[b] else None for k, b in enumerate(dims)])
        elif prim == "transpose":
            pm = _t(par["permutation"])
            xm: list[int | None] = [None] * len(pm)
            for j, src in enumerate(pm):
                xm[src] = m[j]
            put(ins[0], xm)
        elif prim == "squeeze":
            dims = set(_t(par["dimensions"]))
            it = iter(m)
            put(ins[0], [None if d in dims else next(it) for d in range(len(shapes[ins[0]]))])
        elif prim == "expand_dims":
            dims = set(_t(par["dimensions"]))
            put(ins[0], [a for d, a in enumerate(m) if d not in dims])
        elif prim == "reshape":
            src = shapes[ins[0]]
            big_src = [d for d, n in enumerate(src) if n != 1]
            big_out = [d for d, n in enumerate(out) if n != 1]
            if [src[d] for d in big_src] != [out[d] for d in big_out]:
                raise ValueError(f"a reshape that merges or splits axes ({tuple(src)} -> {tuple(out)})")
            xm = [None] * len(src)
            for ds, do in zip(big_src, big_out, strict=True):
                xm[ds] = m[do]
            put(ins[0], xm)
    if carry_out is None and not ys:
        raise ValueError("the program returns nothing the recurrence computes")
    return maps


def _grid_axis(a: int, rank: int) -> int:
    """Grid position of frame axis `a`: batch axes first, then W, then T (last: the carried one)."""
    return a if a < rank - 2 else (rank - 1 if a == rank - 2 else rank - 2)


def build(program: Program) -> tuple[Template, str, dict[str, int]]:
    """(the template, its target size, its dims) for a recurrence program; ValueError says why not."""
    sym = Symbolic(program)
    if sym.mismatch:
        raise ValueError(
            f"its traced program changes structure with size ({'; '.join(sym.mismatch.values())})"
        )
    at = program_at(program, sym.target)
    rec = recognise(at)
    frame, rank = rec.frame, len(rec.frame)
    t_ax, w_ax = rank - 2, rank - 1
    names = program["input_names"]
    ins_at = at["inputs"]
    # the frame's extents written from the inputs' shapes (the carry's shape and the scan's length); the
    # base trace's equations are the ones written out (Symbolic reads each size's numbers from them)
    scan = program["equations"][rec.index]
    carry_src = sym.shape(sym.out_shapes(scan, 0), "the carry")
    frame_src = [*carry_src[:-1], sym.param(scan, "length"), carry_src[-1]]

    # per input: its frame axis per axis, and how each axis is blocked
    blocked: list[list[str]] = []  # per input, per axis: "grid" | "slice" | "whole"
    align_t, align_w = [8], [128]
    for n, s in zip(names, ins_at, strict=True):
        m = rec.maps.get(n)
        kinds = []
        r = len(s["shape"])
        for d in range(r):
            a = m[d] if m else None
            if a is None:
                kinds.append("whole")
            elif a < t_ax and d >= r - 2 and s["shape"][d] != 1:
                kinds.append("slice")  # a batch axis on sublanes or lanes: fetched whole, sliced on load
            else:
                kinds.append("grid")
                if a == t_ax:
                    align_t.append(block_align(r, d, s["dtype"]))
                if a == w_ax:
                    align_w.append(block_align(r, d, s["dtype"]))
        blocked.append(kinds)
    out_dt = [s["dtype"] for s in at["out_specs"]]
    for dt in out_dt:
        align_t.append(block_align(rank, t_ax, dt))
    legal_t = _legal(frame[t_ax], max(align_t))
    legal_w = _legal(frame[w_ax], max(align_w))
    nb = rank - 2
    batch_steps = math.prod(frame[:nb])

    n_scratch = len(rec.xs) + len(rec.ys) + 1

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bt, bw = min(int(c["block_t"]), frame[t_ax]), min(int(c["block_w"]), frame[w_ax])
        blk = {t_ax: bt, w_ax: bw}
        total = 0
        for s, kinds, n in zip(ins_at, blocked, names, strict=True):
            m = rec.maps.get(n) or [None] * len(s["shape"])
            shape = [
                blk.get(m[dd], 1) if k == "grid" else x
                for dd, (x, k) in enumerate(zip(s["shape"], kinds, strict=True))
            ]
            total += 2 * nbytes(shape, s["dtype"])
        total += sum(2 * bt * bw * itemsize(dt) for dt in out_dt)
        total += n_scratch * bt * bw * 4 + 4 * bt * bw * 4  # scratch, and the prologue's f32 temporaries
        return int(total)

    hbm = sum(nbytes(s["shape"], s["dtype"]) for s in ins_at + at["out_specs"])

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        bt, bw = min(int(c["block_t"]), frame[t_ax]), min(int(c["block_w"]), frame[w_ax])
        steps = batch_steps * -(-frame[w_ax] // bw) * -(-frame[t_ax] // bt)
        # the body runs in order: per (batch, W block), T steps of max(latency, vregs) cycles at ~1 GHz
        serial = batch_steps * -(-frame[w_ax] // bw) * frame[t_ax] * max(8, 2 * bw // 128) / 1e3
        penalty = 1e6 if vmem(c, d) > _MAX_VMEM else 0.0
        return hbm / 1.6e12 * 1e6 + 0.35 * steps + serial + penalty

    parts = _source_parts(program, at, rec, sym, blocked, frame_src)
    configs = [{"block_t": t, "block_w": w} for t in legal_t for w in legal_w]
    fitting = [c for c in configs if vmem(c, {}) <= _INITIAL_VMEM]
    initial = (
        min(fitting, key=lambda c: (cost(c, {}), -c["block_w"]))
        if fitting
        else {"block_t": legal_t[0], "block_w": legal_w[0]}
    )
    fixed = {
        **parts,
        "unroll": str(UNROLL),
        "frame": str(tuple(frame)),
        "target": sym.target,
    }

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        out = []
        if int(c["block_t"]) not in legal_t:
            out.append(f"block_t={c['block_t']} is not one of the legal blocks {legal_t}")
        if int(c["block_w"]) not in legal_w:
            out.append(f"block_w={c['block_w']} is not one of the legal blocks {legal_w}")
        return out

    template = Template(
        name="recurrence",
        operators=("program",),
        source=SOURCE,
        tunables={"block_t": tuple(legal_t), "block_w": tuple(legal_w)},
        dims_of=lambda sizes: {"T": frame[t_ax], "W": frame[w_ax]},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: fixed,
        constraints=(
            f"block_t in {legal_t} (divides T={frame[t_ax]}, a multiple of {max(align_t)})",
            f"block_w in {legal_w} (divides W={frame[w_ax]}, a multiple of {max(align_w)})",
        ),
        grid_axes=lambda c: [*(f"batch{k}" for k in range(nb)), "width", "time"],
        semantics=lambda c: ["parallel"] * (nb + 1) + ["arbitrary"],
    )
    return template, sym.target, {"T": frame[t_ax], "W": frame[w_ax]}


def _legal(n: int, align: int) -> list[int]:
    """Powers of two that are multiples of `align` and divide `n`, and `n` itself (one whole block)."""
    out = [b for b in (1 << j for j in range(max(n, 1).bit_length())) if b % align == 0 and n % b == 0]
    top = 1 << max(n - 1, 0).bit_length()  # a block at or past n is the whole dim
    return sorted(set(out) | {top})


def _source_parts(
    program: Program,
    at: Program,
    rec: Recurrence,
    sym: Symbolic,
    blocked: list[list[str]],
    frame_src: list[str],
) -> dict[str, str]:
    names = program["input_names"]
    rank = len(rec.frame)
    nb, t_ax, w_ax = rank - 2, rank - 2, rank - 1
    grid_of = {a: _grid_axis(a, rank) for a in range(rank)}
    ngrid = rank
    iargs = ", ".join(f"i{k}" for k in range(ngrid))
    n_out = len(program["outputs"])
    out_refs = [f"o{i}_ref" for i in range(n_out)]
    eqns = program["equations"]
    prologue = [eqns[i] for i in rec.prologue]
    epilogue = [eqns[i] for i in rec.epilogue]
    used = {a for e in prologue + epilogue for a in e["inputs"]} | set(rec.xs) | set(program["outputs"])
    unmapped = sorted(n for n in used if n in names and n not in rec.maps)
    if unmapped:
        raise ValueError(f"input {unmapped[0]} is a scalar array (no block form)")
    # where each per-step output goes: straight into the output it is, else a scratch
    dest: dict[str, str] = {}
    direct: set[int] = set()  # outputs the loop writes row by row (32-bit rows: no packed sublanes)
    for k, (body_y, fv) in enumerate(rec.ys.items()):
        i = program["outputs"].index(fv) if fv in program["outputs"] else -1
        if i >= 0 and i not in direct and itemsize(program["out_specs"][i]["dtype"]) == 4:
            dest[body_y] = out_refs[i]
            direct.add(i)
        else:
            dest[body_y] = f"ys{k}_scr"
    scratch_refs = ["h_ref"] + [f"xs{k}_scr" for k in range(len(rec.xs))]
    scratch_refs += [d for d in dest.values() if d.endswith("_scr")]
    refs = [f"{n}_ref" for n in names] + out_refs + scratch_refs
    carry_dt = rec.scan["out_specs"][0]["dtype"]
    dts = _dtypes(at)
    # the carry's block: one row of the batch and a width block (a row even without a batch: 2-D)
    cb = ["1"] * max(nb, 1) + [f"b{w_ax}"]
    firsts = [
        f"    r{a} = pl.program_id({grid_of[a]}) * b{a}  # first index of frame axis {a}" for a in range(rank)
    ]
    # the initial carry
    if rec.init[0] == "literal":
        init = f"        h_ref[...] = jnp.full({shape_source(cb)}, {rec.init[1]}, jnp.{carry_dt})"
    else:
        i = names.index(rec.init[1])
        init = f"        h_ref[...] = {_load(rec.init[1], i, blocked[i], rec.maps[rec.init[1]], dts[rec.init[1]])}.reshape({shape_source(cb)}).astype(jnp.{carry_dt})"
    loads = [
        f"    {n} = {_load(n, i, blocked[i], rec.maps.get(n), dts[n])}"
        for i, n in enumerate(names)
        if n in used
    ]

    def shape_of(e: dict, key: str) -> str:
        elems = sym.shape_elems(e, key)
        m = rec.maps.get(e["outputs"][0]) or []
        for d, a in enumerate(m):
            if a is not None and d < len(elems):
                elems[d] = f"b{a}"
        return shape_source(elems)

    def extra(e: dict, expr: str) -> str:
        if e["primitive"] != "iota":
            return expr
        m = rec.maps.get(e["outputs"][0]) or []
        dim = int(e["params"]["dimension"])
        if dim < len(m) and m[dim] is not None:
            return f"lax.add({expr}, lax.convert_element_type(r{m[dim]}, {e['params']['dtype']}))"
        return expr

    def lines(eqns: list[dict]) -> str:
        got = body_lines({**program, "equations": eqns}, shape_of, extra, sym)
        return "\n".join(f"    {ln}" for ln in got) or "    # (no equations)"

    tb = f"b{t_ax}, b{w_ax}"
    xs_stores = "\n".join(
        f"    xs{k}_scr[...] = {operand(v)}.reshape({tb}).astype(xs{k}_scr.dtype)  # [block_t, block_w]"
        for k, v in enumerate(rec.xs)
    )
    body = rec.body
    carry_in, *xs_in = body["inputs"]
    step = [
        f"        {x} = xs{k}_scr[pl.ds(t, 1), :].reshape({shape_source(cb)}).astype(jnp.{dts[v]})"
        for k, (x, v) in enumerate(zip(xs_in, rec.xs, strict=True))
    ]
    step += [f"        {ln}" for ln in body_lines({"equations": body["equations"]})]
    for body_y, d in dest.items():
        row = "pl.ds(t, 1), :" if d.endswith("_scr") else ", ".join(["0"] * nb + ["pl.ds(t, 1)", ":"])
        step.append(f"        {d}[{row}] = {operand(body_y)}.reshape(1, b{w_ax}).astype({d}.dtype)")
    step.append(f"        return {operand(body['outputs'][0])}")
    fb = shape_source([f"b{a}" for a in range(rank)])
    consts = "\n".join(
        f"    {c} = {_load(c, names.index(c), blocked[names.index(c)], rec.maps[c], dts[c])}"
        f".reshape({shape_source(cb)})  # loop-invariant in the body"
        for c in rec.consts
    )
    consts += "\n" if consts else ""
    if nb == 0 and any(c in e["inputs"] for c in rec.consts for e in epilogue):
        raise ValueError("a loop-invariant operand the epilogue reads too, with no batch axis")
    epi = []
    for body_y, d in dest.items():
        fv = rec.ys[body_y]
        if d.endswith("_scr") or any(fv in e["inputs"] for e in epilogue):
            epi.append(f"    {fv} = {d}[...].reshape({fb}).astype(jnp.{dts[fv]})")
    if epilogue:
        epi.append("    # the epilogue: the reference's equations after the scan")
        epi.append(lines(epilogue))
    stores = []
    for i, o in enumerate(program["outputs"]):
        if o == rec.carry_out:
            stores.append(f"    o{i}_ref[...] = h_ref[...].reshape(o{i}_ref.shape).astype(o{i}_ref.dtype)")
        elif i not in direct:
            stores.append(f"    o{i}_ref[...] = {operand(o)}.astype(o{i}_ref.dtype)")
    # index maps and specs
    maps_src, in_specs = [], []
    for i, (n, s) in enumerate(zip(names, at["inputs"], strict=True)):
        m = rec.maps.get(n)
        r = len(s["shape"])
        if m is None:
            maps_src.append(f"    # {n} is not read by the kernel: left in HBM")
            in_specs.append("pl.BlockSpec(memory_space=pltpu.ANY)")
            continue
        blk, idx = [], []
        for d in range(r):
            if blocked[i][d] == "grid" and m[d] is not None:
                blk.append(f"b{m[d]}")
                idx.append(f"i{grid_of[m[d]]}")
            else:
                blk.append(f"sh[{i}][{d}]")
                idx.append("0")
        what = ", ".join(
            f"axis {d} {'by frame axis ' + str(m[d]) if k == 'grid' and m[d] is not None else ('whole, sliced in the kernel' if k == 'slice' else 'whole')}"
            for d, k in enumerate(blocked[i])
        )
        maps_src.append(
            f"    # {n} is {tuple(s['shape'])} at the target: {what}\n"
            f"    def {n}_map({iargs}):\n        return {', '.join(idx)}{',' if r == 1 else ''}\n"
        )
        in_specs.append(f"pl.BlockSpec({shape_source(blk)}, {n}_map)")
    out_specs, out_shapes = [], []
    for i, (o, s) in enumerate(zip(program["outputs"], program["out_specs"], strict=True)):
        if o == rec.carry_out:
            blk = ["1"] * nb + [f"b{w_ax}"]
            idx = [f"i{grid_of[a]}" for a in range(nb)] + [f"i{grid_of[w_ax]}"]
            shape = [*frame_src[:nb], frame_src[w_ax]]
            what = "the final carry"
        else:
            blk = [f"b{a}" for a in range(rank)]
            idx = [f"i{grid_of[a]}" for a in range(rank)]
            shape = frame_src
            what = "a frame block"
        maps_src.append(
            f"    # output {i}: {what}\n    def o{i}_map({iargs}):\n        return {', '.join(idx)}{',' if len(idx) == 1 else ''}\n"
        )
        out_specs.append(f"pl.BlockSpec({shape_source(blk)}, o{i}_map)")
        out_shapes.append(f"jax.ShapeDtypeStruct({shape_source(shape)}, jnp.{s['dtype']})")
    scratch = [f"pltpu.VMEM({shape_source(cb)}, jnp.{carry_dt})"]
    scratch += [f"pltpu.VMEM(({tb}), jnp.{_f32(dts[x])})" for x in rec.xs]
    scratch += [f"pltpu.VMEM(({tb}), jnp.float32)" for d in dest.values() if d.endswith("_scr")]
    extents = [f"    n{a} = {frame_src[a]}  # frame axis {a}" for a in range(rank)]
    extents += [f"    b{a} = 1  # one batch row per grid step" for a in range(nb)]
    extents.append(
        f"    b{t_ax} = min(BLOCK_T, n{t_ax})\n    b{t_ax} = b{t_ax} if n{t_ax} % b{t_ax} == 0 else n{t_ax}"
    )
    extents.append(
        f"    b{w_ax} = min(BLOCK_W, n{w_ax})\n    b{w_ax} = b{w_ax} if n{w_ax} % b{w_ax} == 0 else n{w_ax}"
    )
    grid_items = [""] * rank
    for a in range(rank):
        grid_items[grid_of[a]] = f"n{a} // b{a}"
    init_what = f"the constant {rec.init[1]}" if rec.init[0] == "literal" else f"the input {rec.init[1]}"
    return {
        "refs": ", ".join(refs),
        "block_kw": ", ".join(f"b{a}" for a in range(rank)),
        "block_pass": ", ".join(f"b{a}=b{a}" for a in range(rank)),
        "firsts": "\n".join(firsts),
        "t_grid": str(grid_of[t_ax]),
        "init": init,
        "init_what": init_what,
        "loads": "\n".join(loads) or "    # no input is read outside the loop",
        "prologue": lines(prologue),
        "xs_stores": xs_stores,
        "consts": consts,
        "carry": operand(carry_in),
        "step": "\n".join(step),
        "bt": f"b{t_ax}",
        "epilogue": "\n".join(epi),
        "stores": "\n".join(stores),
        "args": ", ".join(names),
        "shapes": ", ".join(f"{n}.shape" for n in names) + ("," if len(names) == 1 else ""),
        "extents": "\n".join(extents),
        "maps": "\n".join(maps_src).rstrip("\n"),
        "out_shapes": ", ".join(out_shapes),
        "grid": ", ".join(grid_items) + ("," if rank == 1 else ""),
        "in_specs": ", ".join(in_specs),
        "out_specs": ", ".join(out_specs),
        "scratch": ", ".join(scratch),
        "semantics": ", ".join(['"parallel"'] * (rank - 1) + ['"arbitrary"']),
        "result": "out[0]" if n_out == 1 else "(" + ", ".join(f"out[{i}]" for i in range(n_out)) + ")",
    }


def _f32(dtype: str) -> str:
    return dtype if itemsize(dtype) >= 4 else "float32"


def _dtypes(program: Program) -> dict[str, str]:
    """Every named value's dtype (inputs and equation outputs)."""
    specs = {n: s["dtype"] for n, s in zip(program["input_names"], program["inputs"], strict=True)}
    for e in program["equations"]:
        for o, s in zip(e["outputs"], e["out_specs"], strict=True):
            specs[o] = s["dtype"]
    return specs


def _load(name: str, i: int, kinds: list[str], m: list[int | None] | None, dtype: str) -> str:
    """The load of input `name`'s block: whole, or its batch axes (block 1) picked at this step's index.
    A 32-bit row is loaded at a dynamic sublane offset; a packed dtype's cannot be (Mosaic cannot prove
    the offset is a multiple of its packing), so its block is loaded whole and the row picked exactly by
    a masked f32 sum (one nonzero term)."""
    if "slice" not in kinds:
        return f"{name}_ref[...]"
    assert m is not None
    if itemsize(dtype) == 4:
        idx = [f"pl.ds(r{m[d]}, b{m[d]})" if k == "slice" else ":" for d, k in enumerate(kinds)]
        return f"{name}_ref[{', '.join(idx)}]"
    x = f"{name}_ref[...].astype(jnp.float32)"
    for d, k in enumerate(kinds):
        if k == "slice":
            x = (
                f"jnp.sum(jnp.where(lax.broadcasted_iota(jnp.int32, {name}_ref.shape, {d}) == r{m[d]}, "
                f"{x}, 0.0), axis={d}, keepdims=True)"
            )
    return f"{x}.astype(jnp.{dtype})"
