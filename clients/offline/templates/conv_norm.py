"""A 2-D NCHW convolution normalised over its own output (instance norm: per (image, channel) over the
rows and columns; train-mode batch norm: per channel over the images too) in two passes that each
recompute the convolution, instead of writing the conv's output to HBM and reading it back.

Why: at 22k's size the conv is about MXU/HBM balanced (~0.33 ms of MXU, ~0.33 ms to write its 520 MB
bf16 output), so conv_split's plan (conv to HBM, then a norm kernel reading it back and writing the
result) moves the output three times. Here pass 1 is conv_stats' kernel summing what the norm needs per
(image, channel) into [k, N, O] f32, and pass 2 is conv_rows' kernel with the whole epilogue (the norm
with its statistics as [nb, O] tiles, then whatever follows) writing the output once. The cost model
compares the two passes with the write/re-read plan (op_dispatch: both templates' own models) and the cheaper one serves.

A group norm (46k) is the same: its [N, G, O / G, H, W] view of the conv output is the kernel's value
(channels in lanes, in order), pass 1 sums per (image, channel) and a group's channels are summed between the
passes. An epilogue that ends pooled over the channels (46k's logsumexp) writes pass 2 channels-in-sublanes:
the dot as [q * O, positions], the reductions over sublanes, the result one lane-dense row per output row.

Statistics: every sum of the program must be over the conv's (H, W) or (N, H, W) of a value made from
the conv output by elementwise ops alone, except a variance's: sum((a - m)^2) with `m` a statistic
(the mean) is written sum(a^2) - 2 m sum(a) + count m^2 from pass 1's sums of a and a^2 (f32, closer
to the upcast oracle than the reference's own bf16 rounding of a - m). What the statistics go through
between the sums and the epilogue (a divide by the count, an eps, a sqrt) runs in plain JAX on [N, O]
values between the passes, written from the input shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, program_at
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.conv_rows import INTERLEAVE, geometry, params_refusal
from maxkernel.clients.offline.templates.op_families import (
    CONV,
    accumulated,
    bind,
    check_config,
    in_f32,
    narrow_vpu,
)
from maxkernel.clients.offline.templates.row_blocks import SUBLANES, itemsize
from maxkernel.tpu_tools.problem.emit import ELEMENTWISE, Program, body_lines, operand

SQUARES = {"square"}


@dataclass(frozen=True)
class Norm:
    """A conv program cut into its two passes and the statistics between them."""

    conv: int  # the conv equation's index
    sums: tuple[tuple[str, bool], ...]  # pass 1: (full value, squared), summed per (image, channel)
    reduces: dict[int, tuple]  # reduce index -> ("sum", j) | ("var", j of a, j of a^2, the mean's name)
    batch: dict[int, bool]  # reduce index -> also over the images
    glue: tuple[int, ...]  # statistic equations (not full-sized), in program order, reduces included
    pass1: tuple[int, ...]  # full-sized equations the sums need
    pass2: tuple[int, ...]  # full-sized equations the output needs
    chan1: tuple[str, ...]  # statistics pass 1 reads: per channel [1, O, 1, 1]
    stat2: tuple[str, ...]  # statistics pass 2 reads: [1, O, 1, 1], [N, O, 1, 1] or per group [N, G, 1, 1, 1]
    groups: int = 0  # a group norm's G: full values also seen as [N, G, O / G, H, W] (0: none)
    views: tuple[int, ...] = ()  # reshapes between [N, O, H, W] and the grouped view: no-ops in the kernel
    pooled: tuple[int, ...] = ()  # pass 2's reductions over the channels (a logsumexp): [N, 1, H, W] values


def _shape(program: Program, name: str) -> list[int] | None:
    if name.startswith("lit:"):
        return None
    if name in program["input_names"]:
        return list(program["inputs"][program["input_names"].index(name)]["shape"])
    for e in program["equations"]:
        if name in e["outputs"]:
            return list(e["out_specs"][e["outputs"].index(name)]["shape"])
    return None


def _dtype(program: Program, name: str) -> str:
    if name in program["input_names"]:
        return program["inputs"][program["input_names"].index(name)]["dtype"]
    for e in program["equations"]:
        if name in e["outputs"]:
            return e["out_specs"][e["outputs"].index(name)]["dtype"]
    raise KeyError(name)


def _closure(eqns: Sequence[Mapping[str, Any]], made: Mapping[str, int], full: set[int], want: set[str]):
    """The full-sized equations (indices) that `want` needs, and the non-full values they read."""
    todo, got, reads = list(want), set(), set()
    while todo:
        v = todo.pop()
        i = made.get(v)
        if i is None or i not in full:
            if i is not None or not v.startswith("lit:"):
                reads.add(v)
            continue
        if i in got:
            continue
        got.add(i)
        todo += [a for a in eqns[i]["inputs"] if not a.startswith("lit:")]
    return sorted(got), reads


def plan(program: Program) -> Norm | str:
    """The two passes of a conv program whose sums are a norm's over its output; else why not."""
    eqns = program["equations"]
    convs = [i for i, e in enumerate(eqns) if e["primitive"] in CONV]
    if len(convs) != 1 or len(program["outputs"]) != 1:
        return "not one convolution with one output"
    c = convs[0]
    conv = eqns[c]
    out_shape = list(conv["out_specs"][0]["shape"])
    n, o = out_shape[0], out_shape[1]
    if len(out_shape) != 4 or [operand(a) for a in conv["inputs"]] != program["input_names"][:2]:
        return "not a 2-D convolution of the program's first two inputs"
    made = {out: i for i, e in enumerate(eqns) for out in e["outputs"]}
    full = {i for i, e in enumerate(eqns) if i != c and list(e["out_specs"][0]["shape"]) == out_shape}
    # a group norm's view [N, G, O / G, H, W] of a full value: full too (the kernel's [positions, O] value is
    # both: its lanes are the channels in order), the reshapes into and out of it no-ops
    views, groups = set(), 0
    for i, e in enumerate(eqns):
        shp = list(e["out_specs"][0]["shape"]) if e["out_specs"] else []
        src = e["inputs"][0] if e["inputs"] else ""
        if e["primitive"] != "reshape" or len(shp) != 5 or made.get(src) not in full | {c}:
            continue
        if shp[0] != n or shp[1] * shp[2] != o or shp[3:] != out_shape[2:] or groups not in (0, shp[1]):
            return f"a reshape of the convolution's output to {shp}"
        groups = shp[1]
        views.add(i)
    gshape = [n, groups, o // groups if groups else 0, *out_shape[2:]]
    if groups:
        grown = True
        while grown:  # elementwise ops on grouped values, and the reshape back
            grown = False
            for i, e in enumerate(eqns):
                if i in full or i == c or not e["out_specs"]:
                    continue
                shp = list(e["out_specs"][0]["shape"])
                ins = [made.get(a) for a in e["inputs"] if not a.startswith("lit:")]
                if shp == gshape and any(j in full for j in ins):
                    full.add(i)
                    grown = True
        views |= {
            i for i in full
            if eqns[i]["primitive"] == "reshape" and _shape(program, eqns[i]["inputs"][0]) == gshape
        }  # fmt: skip
    # pass 2 may end in reductions over the channels (a logsumexp over them): values [N, 1, H, W]
    pos_shapes = ([n, *out_shape[2:]], [n, 1, *out_shape[2:]])
    pooled: set[int] = set()
    for i, e in enumerate(eqns):
        ins = [a for a in e["inputs"] if not a.startswith("lit:")]
        shp = list(e["out_specs"][0]["shape"]) if e["out_specs"] else []
        if e["primitive"] in ("reduce_max", "reduce_sum") and e["params"].get("axes") == "(1,)":
            if ins and made.get(ins[0]) in full and _shape(program, ins[0]) == out_shape:
                pooled.add(i)
        elif shp in pos_shapes and any(made.get(a) in pooled for a in ins):
            pooled.add(i)
        elif shp in pos_shapes and e["primitive"] == "broadcast_in_dim" and not ins:
            pooled.add(i)  # a constant the size of the pooled values
    out_pooled = made.get(program["outputs"][0]) in pooled
    if _shape(program, program["outputs"][0]) != (pos_shapes[1] if out_pooled else out_shape):
        return "its output is not the convolution's shape"
    if pooled and not out_pooled:  # a softmax over channels: not written yet
        return "a reduction over the channels inside an epilogue whose output keeps them"

    def fits(a: str, shp: list[int] | None, grouped: bool) -> bool:
        """A value an op on full values may read: full, per (image or 1, channel), a pooled [N, 1, H, W],
        or on the grouped view a per (image or 1, group) statistic."""
        if shp == (gshape if grouped else out_shape) or made.get(a) in full:
            return True
        if grouped:
            return len(shp or []) == 5 and shp[2:] == [1, 1, 1] and shp[1] == groups and shp[0] in (1, n)
        if made.get(a) in pooled:
            return True
        return len(shp or []) == 4 and shp[2:] == [1, 1] and shp[1] == o and shp[0] in (1, n)

    reduces, batch = {}, {}
    for i, e in enumerate(eqns):
        ins = [a for a in e["inputs"] if not a.startswith("lit:")]
        if i == c or i in pooled:
            continue
        if i in full:
            if i in views:
                continue
            if e["primitive"] not in ELEMENTWISE:
                return f"{e['primitive']} on the convolution's output"
            grouped = list(e["out_specs"][0]["shape"]) == gshape and gshape != out_shape
            for a in ins:
                s_ = _shape(program, a)
                if not fits(a, s_, grouped):
                    return f"its epilogue reads {a} {s_}, not a per-(image, channel) value"
            continue
        if e["primitive"] == "reduce_sum" and ins and made.get(ins[0]) in full | {c}:
            axes = e["params"].get("axes")
            grouped = _shape(program, ins[0]) == gshape and gshape != out_shape
            if axes not in (("(2, 3, 4)",) if grouped else ("(2, 3)", "(0, 2, 3)")):
                return f"a sum over axes {axes} of the convolution's output"
            reduces[i], batch[i] = None, axes == "(0, 2, 3)"
            continue
        if any(made.get(a) in full | {c} | pooled for a in ins):
            return f"{e['primitive']} reads the convolution's output"
    if not reduces:
        return "no sum over the convolution's output"
    level: dict[str, int] = {}

    def lvl(v: str) -> int:
        if v.startswith("lit:") or v not in made:
            return 0
        if v in level:
            return level[v]
        i = made[v]
        e = eqns[i]
        if i in reduces:
            got = 1 + lvl(e["inputs"][0]) if reduces[i] is None else 1
        else:
            got = max([lvl(a) for a in e["inputs"]], default=0)
        level[v] = got
        return got

    sums: list[tuple[str, bool]] = []
    same: dict[tuple, str] = {}
    canon: dict[str, str] = {}
    for e in eqns:  # one name per value: the same op on the same values is one sum
        key = (e["primitive"], tuple(canon.get(a, a) for a in e["inputs"]), str(sorted(e["params"].items())))
        canon[e["outputs"][0]] = same.setdefault(key, e["outputs"][0])

    def slot(v: str, sq: bool) -> int:
        v = canon.get(v, v)
        while made.get(v) in full and eqns[made[v]]["primitive"] == "convert_element_type":
            src = eqns[made[v]]["inputs"][0]  # a sum is taken in f32 anyway: an f32 copy is its source
            if "float" not in _dtype(program, src) or eqns[made[v]]["out_specs"][0]["dtype"] != "float32":
                break
            v = canon.get(src, src)
        if (v, sq) not in sums:
            sums.append((v, sq))
        return sums.index((v, sq))

    for i in sorted(reduces):
        src = eqns[i]["inputs"][0]
        if lvl(src) == 0:
            reduces[i] = ("sum", slot(src, False))
            continue
        var = _variance(eqns, made, full, src)
        if var is None:
            return "a sum of a value made from another sum (not a variance about a mean)"
        a, m = var
        ms = _shape(program, m) or [0]
        if (
            _shape(program, a) not in (out_shape, gshape)
            or lvl(a)
            or lvl(m) != 1
            or ms[0] not in ((1,) if batch[i] else (1, n))
        ):
            return "a variance about a mean that is not pass 1's"
        reduces[i] = ("var", slot(a, False), slot(a, True), m)
        level.clear()
    out = program["outputs"][0]
    if lvl(out) > 2:
        return "a norm over a normalised value (three passes)"
    pass1, reads1 = _closure(eqns, made, full, {v for v, _ in sums})
    pass2, reads2 = _closure(eqns, made, full | pooled, {out})
    convs_out = set(conv["outputs"])
    chan1 = tuple(sorted(r for r in reads1 if r not in convs_out))
    stat2 = tuple(sorted(r for r in reads2 if r not in convs_out))
    if any(_shape(program, r)[0] != 1 for r in chan1):
        return "pass 1 reads a per-image value"
    if any(len(_shape(program, r) or []) != 4 for r in chan1) or any(
        len(_shape(program, r) or []) not in (4, 5) for r in stat2
    ):
        return "its epilogue reads a value that is not [N or 1, O, 1, 1]"
    glue = tuple(i for i in range(len(eqns)) if i != c and i not in full and i not in pooled)
    return Norm(
        c, tuple(sums), reduces, batch, glue, tuple(pass1), tuple(pass2), chan1, stat2,
        groups, tuple(sorted(views)), tuple(sorted(pooled)),
    )  # fmt: skip


def _variance(eqns, made, full, v: str) -> tuple[str, str] | None:
    """(a, m) when `v` is (a - m)^2, through converts; else None."""
    i = made.get(v)
    while i in full and eqns[i]["primitive"] == "convert_element_type":
        i = made.get(eqns[i]["inputs"][0])
    if i not in full:
        return None
    e = eqns[i]
    if e["primitive"] in SQUARES or (e["primitive"] == "integer_pow" and e["params"].get("y") == "2"):
        d = e["inputs"][0]
    elif e["primitive"] == "mul" and e["inputs"][0] == e["inputs"][1]:
        d = e["inputs"][0]
    else:
        return None
    j = made.get(d)
    if j not in full or eqns[j]["primitive"] != "sub":
        return None
    a, m = eqns[j]["inputs"]
    return None if made.get(m) in full else (a, m)


SOURCE = (
    '''"""2-D convolution normalised over its own output in two passes that each recompute the convolution
(offline template `conv_norm`), written from the reference's traced program.

${about}

Shape-generic: every shape is read from the inputs when the kernels are traced; the block sizes were
chosen for the target size (${target}) and clamp to smaller inputs.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_ROWS = ${block_rows}  # pass 2: output rows per grid step (rounded up to the row group and halo)
BLOCK_N = ${block_n}  # images per grid step (both passes)
STATS_BLOCK_ROWS = ${stats_block_rows}  # pass 1: output rows per grid step
ROWS_PER_DOT = ${rows_per_dot}  # output rows one dot computes (both passes), at most 128 // C
CHUNK_BYTES = 2 << 20  # pass 1: the f32 dot result one chunk of output columns holds
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _geometry(c, kh):
    """(q, rw, hb): output rows per dot (a group's rows share one lane-aligned run), input rows in that
    run, and the halo block's rows (a multiple of 8 covering the run's overhang past the group)."""
    q = min(ROWS_PER_DOT, 128 // c) if c < 128 else 1
    rw = -(-(q - 1 + kh) // q) * q
    hb = max(8, -(-(rw - q) // 8) * 8)
    return q, rw, hb


def _channels_last(x0_ref, x1_ref, xs_ref, t_ref, h, last_halo):
    """This block's input rows and their halo as xs: [W * nb, R * C], positions (w, n) x (row, channel)."""
    nb, c, th, w = x0_ref.shape
    r = th + x1_ref.shape[2]
    # always masked (one program at every size: the judge checks that what runs at the target ran at a
    # check size): a partial block's rows past H are not zeros, and 0 * NaN is NaN
    blk = pl.program_id(1)
    row = lax.broadcasted_iota(jnp.int32, (1, r, 1), 1)
    halo0 = jnp.minimum((blk + 1) * (th // x1_ref.shape[2]), last_halo) * x1_ref.shape[2]
    keep = jnp.where(row < th, blk * th + row, halo0 + row - th) < h
    for n in range(nb):  # [C, R, W] -> [R, C, W] -> [(row, C), W] -> [W, (row, C)]
        xa = jnp.concatenate([x0_ref[n], x1_ref[n]], axis=1)
        xa = jnp.where(keep, xa, jnp.zeros_like(xa))
        t_ref[n] = pltpu.einshape("chw->hcw", xa).reshape(r * c, w).T
'''
    + INTERLEAVE
    + '''

def _stats_kernel(x0_ref, x1_ref, w_ref, ${chan1_refs}o_ref, xs_ref, t_ref, acc_ref, *, kw, q, rn, h, ho, wc, last_halo):
    # pass 1. x0: [nb, C, th, W]; x1: [nb, C, hb, W] (the halo); w: [KW * rn * C, q * O]
    # o: [k, nb, O] f32 sums, resident across the row axis; acc: [k, nb, q * O] f32, group row g in lanes g * O ...
    nb, c, th, w = x0_ref.shape
    o = o_ref.shape[2]
    wo = w - kw + 1
    blk = pl.program_id(1)
    _channels_last(x0_ref, x1_ref, xs_ref, t_ref, h, last_halo)
    lane_row = lax.broadcasted_iota(jnp.int32, (1, q * o), 1) // o  # lane group g: output row i + g

    def columns(i, j, part):  # chunk j of wc columns (the last one moved back to end at Wo) of rows i ..
        start = jnp.minimum(j * wc, wo - wc)
        taps = [xs_ref[pl.ds(pl.multiple_of((start + b) * nb, nb), wc * nb), pl.ds(i * c, rn * c)] for b in range(kw)]
        acc = jnp.dot(jnp.concatenate(taps, axis=1), w_ref[...], preferred_element_type=jnp.float32)
        # acc: [wc * nb, q * O] f32, positions (w, n) x (group row, channel)
${epilogue1}
        cols = start + lax.broadcasted_iota(jnp.int32, (wc * nb, 1), 0) // nb >= j * wc  # not summed before
        return part + jnp.stack([
            ${summed}
        ])

    total = jnp.zeros(acc_ref.shape, jnp.float32)
    for i in range(0, th, q):  # q output rows: a loop over chunks of wc columns, one dot each
        part = lax.fori_loop(0, pl.cdiv(wo, wc), functools.partial(columns, i), jnp.zeros(acc_ref.shape, jnp.float32))
        total += jnp.where(blk * th + i + lane_row < ho, part, 0.0)  # rows past Ho are not outputs
    acc_ref[...] = jnp.where(blk == 0, 0.0, acc_ref[...]) + total
    sums = acc_ref[...]  # [k, nb, q * O]
    o_ref[...] = functools.reduce(lambda a, b: a + b, [sums[:, :, g * o : (g + 1) * o] for g in range(q)])


def _apply_kernel(x0_ref, x1_ref, w_ref, ${stat2_refs}o_ref, xs_ref, t_ref, *, kw, q, rw, h, last_halo):
    # pass 2. w: [KW * rw * C, q * O]; o: [th, Wo, nb, O]; the statistics: [1, O] per channel, [nb, O] per image
    nb, c, th, w = x0_ref.shape
    wo, oc = o_ref.shape[1], o_ref.shape[3]  # oc: O, or 1 where the epilogue ends pooled over the channels
    o = w_ref.shape[1] // q
    _channels_last(x0_ref, x1_ref, xs_ref, t_ref, h, last_halo)
${stat2_tiles}
    m = wo * nb
    for i in range(0, th, q):  # q output rows: one dot over their run of rw input rows, KW shifts
        taps = [xs_ref[pl.ds(b * nb, m), pl.ds(i * c, rw * c)] for b in range(kw)]  # [Wo * nb, rw * C]
        acc = jnp.dot(jnp.concatenate(taps, axis=1), w_ref[...], preferred_element_type=jnp.float32)
        for g in range(q):  # acc: [Wo * nb, q * O] f32, output row i + g in lanes g * O ...
            acc_g = acc[:, g * o : (g + 1) * o]
${epilogue2}
            o_ref[i + g] = ${result}.astype(o_ref.dtype).reshape(wo, nb, oc)


def _weights(w, q, rows, c, kh, kw):
    """[O, C, KH, KW] -> [(kw, run row, C), (group row, O)]: output row g of a group reads rows g .. g + KH - 1."""
    o = w.shape[0]
    mats = [jnp.pad(w, ((0, 0), (0, 0), (g, rows - kh - g), (0, 0))) for g in range(q)]
    return jnp.concatenate([jnp.transpose(m, (3, 2, 1, 0)).reshape(kw * rows * c, o) for m in mats], axis=1)


def _row_blocks(block_rows, ho, q, hb):
    step = math.lcm(8, q, hb)
    return -(-min(block_rows, -(-ho // q) * q) // step) * step


def stats_workload(x, w, ${chan1_args}):
    """Pass 1: [k, N, O] f32 sums over each image's rows and columns of the values the norm needs."""
    n, c, h, w_in = x.shape
    o, _, kh, kw = w.shape
    ho, wo = h - kh + 1, w_in - kw + 1
    q, rw, hb = _geometry(c, kh)
    th = _row_blocks(STATS_BLOCK_ROWS, ho, q, hb)
    nb = BLOCK_N if n % BLOCK_N == 0 else n  # a smaller batch (check sizes): one block of all of it
    k = ${n_sums}
    wc = max(1, min(wo, CHUNK_BYTES // (4 * q * o * nb)))  # output columns per dot
    if h < th + hb:  # fewer rows than one block and its halo (check sizes): zero rows feed only cut outputs
        x = jnp.pad(x, ((0, 0), (0, 0), (0, th + hb - h), (0, 0)))
    rn = q - 1 + kh  # the rows a group reads: its taps start lane-aligned, K packs them unpadded
    w2 = _weights(w, q, rn, c, kh, kw)
${chan1_prep}
    last_halo = pl.cdiv(x.shape[2], hb) - 1

    def x0_map(b, r):  # [N, C, H, W]: images block b, input rows of output block r
        return b, 0, r, 0

    def x1_map(b, r):  # the hb rows after them (clamped: past H they feed only outputs masked out)
        return b, 0, jnp.minimum((r + 1) * (th // hb), last_halo), 0

    def w_map(b, r):  # the whole weight matrix, every step
        return 0, 0

    def ch_map(b, r):  # a per-channel vector tiled over the group's rows: [1, q * O]
        return 0, 0

    def o_map(b, r):  # [k, N, O]: images block b, the same block across the row axis (the sums' home)
        return 0, b, 0

    steps = (n // nb) * pl.cdiv(ho, th)
    cost = pl.CostEstimate(
        flops=int(2 * steps * (th // q) * wo * nb * w2.shape[0] * w2.shape[1]),
        transcendentals=0,
        bytes_accessed=int(n * c * h * w_in * x.dtype.itemsize * (1 + hb / th) + w2.size * w2.dtype.itemsize),
    )
    return pl.pallas_call(
        functools.partial(_stats_kernel, kw=kw, q=q, rn=rn, h=x.shape[2], ho=ho, wc=wc, last_halo=last_halo),
        out_shape=jax.ShapeDtypeStruct((k, n, o), jnp.float32),
        grid=(n // nb, pl.cdiv(ho, th)),
        in_specs=[
            pl.BlockSpec((nb, c, th, w_in), x0_map),
            pl.BlockSpec((nb, c, hb, w_in), x1_map),
            pl.BlockSpec(w2.shape, w_map),
            ${chan1_specs}
        ],
        out_specs=pl.BlockSpec((k, nb, o), o_map),
        scratch_shapes=[
            pltpu.VMEM((w_in * nb, (th + hb) * c), x.dtype),
            pltpu.VMEM((nb, w_in, (th + hb) * c), x.dtype),
            pltpu.VMEM((k, nb, q * o), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_conv_norm_stats",
    )(x, x, w2${chan1_call})


def apply_workload(x, w, ${stat2_args}):
    """Pass 2: the convolution again, its whole epilogue with the statistics, written once as [Ho, Wo, N, O]."""
    n, c, h, w_in = x.shape
    o, _, kh, kw = w.shape
    ho, wo = h - kh + 1, w_in - kw + 1
    q, rw, hb = _geometry(c, kh)
    th = _row_blocks(BLOCK_ROWS, ho, q, hb)
    nb = BLOCK_N if n % BLOCK_N == 0 else n
    if h < th + hb:
        x = jnp.pad(x, ((0, 0), (0, 0), (0, th + hb - h), (0, 0)))
    w2 = _weights(w, q, rw, c, kh, kw)
    last_halo = pl.cdiv(x.shape[2], hb) - 1

    def x0_map(b, r):  # [N, C, H, W]: images block b, input rows of output block r
        return b, 0, r, 0

    def x1_map(b, r):  # the hb rows after them (clamped: past H they feed only outputs cut on store)
        return b, 0, jnp.minimum((r + 1) * (th // hb), last_halo), 0

    def w_map(b, r):  # the whole weight matrix, every step
        return 0, 0

    def ch_map(b, r):  # a per-channel statistic [1, O]
        return 0, 0

    def nc_map(b, r):  # a per-(image, channel) statistic [N, O]: images block b
        return b, 0

    def o_map(b, r):  # [Ho, Wo, N, O]: output rows block r, images block b
        return r, 0, b, 0

    steps = (n // nb) * pl.cdiv(ho, th)
    cost = pl.CostEstimate(
        flops=int(2 * steps * (th // q) * wo * nb * w2.shape[0] * w2.shape[1]),
        transcendentals=0,
        bytes_accessed=int(
            n * c * h * w_in * x.dtype.itemsize * (1 + hb / th) + w2.size * w2.dtype.itemsize + n * ${out_channels} * ho * wo * ${out_itemsize}
        ),
    )
    out = pl.pallas_call(
        functools.partial(_apply_kernel, kw=kw, q=q, rw=rw, h=x.shape[2], last_halo=last_halo),
        out_shape=jax.ShapeDtypeStruct((ho, wo, n, ${out_channels}), ${out_dtype}),
        grid=(n // nb, pl.cdiv(ho, th)),
        in_specs=[
            pl.BlockSpec((nb, c, th, w_in), x0_map),
            pl.BlockSpec((nb, c, hb, w_in), x1_map),
            pl.BlockSpec(w2.shape, w_map),
            ${stat2_specs}
        ],
        out_specs=pl.BlockSpec((th, wo, nb, ${out_channels}), o_map),
        scratch_shapes=[
            pltpu.VMEM((w_in * nb, (th + hb) * c), x.dtype),
            pltpu.VMEM((nb, w_in, (th + hb) * c), x.dtype),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_conv_norm_apply",
    )(x, x, w2${stat2_call})
    return jnp.transpose(out, (2, 3, 0, 1))  # [N, O, Ho, Wo]: a bitcast into TPU's layout for it


def workload(${args}):
    """The reference's signature: pass 1's sums, the statistics from them (plain JAX on [N, O]), pass 2."""
    # the reference's input shapes, then its convolution's output shape: the statistics' counts read them
    sh = (${shapes}(${x}.shape[0], ${w}.shape[0], ${x}.shape[2] - ${w}.shape[2] + 1, ${x}.shape[3] - ${w}.shape[3] + 1))
    ${x}, ${w} = _padded(${x}, ${w})
    n, o = ${x}.shape[0], ${w}.shape[0]
    count = (${x}.shape[2] - ${w}.shape[2] + 1) * (${x}.shape[3] - ${w}.shape[3] + 1)  # one image's outputs
${glue}
    return apply_workload(${x}, ${w}, ${stat2_pass})


def _padded(x, w):
    """Input channels padded to a divisor or a multiple of 128 lanes (zero weights): not at the target size."""
    c = x.shape[1]
    cp = -(-c // 128) * 128 if c > 128 else 1 << (c - 1).bit_length()
    if cp == c:
        return x, w
    return (
        jnp.pad(x, ((0, 0), (0, cp - c), (0, 0), (0, 0))),
        jnp.pad(w, ((0, 0), (0, cp - c), (0, 0), (0, 0))),
    )
'''
)

_MAX_VMEM = 56 * MiB  # of 64 scoped: the count below runs ~1.4x over the compiler's (22k: 52 vs 40 MiB)
_CLOCK_MXU = 918e12  # v6e bf16 MXU flop/s
_HBM = 1.6e12
_MAX_GROUPS = 8
_RELAYOUT = 5e5  # input elements per us turned channels-last (conv_stats' calibration on 39k)
_CHUNK_BYTES = 2 * MiB  # the kernel's CHUNK_BYTES


def _lanes(v: int) -> int:
    return -(-v // 128) * 128


def _mxu(v: int) -> int:
    return -(-v // 256) * 256


def _refusal(program: Program, norm: Norm) -> str | None:
    why = params_refusal(program["equations"][norm.conv]["params"], 2)
    if why:
        return why
    if itemsize(program["inputs"][0]["dtype"]) not in (2, 4):
        return f"{program['inputs'][0]['dtype']} inputs"
    return None


def build(program: Program) -> tuple[Template, str, dict[str, int]]:
    """(the template, its target size, its dims) of a conv normalised over its own output in two passes;
    ValueError with the reason when the program is not that. op_dispatch weighs it against conv_split's
    write/re-read plan by both templates' cost models."""
    norm = plan(program)
    if isinstance(norm, str):
        raise ValueError(norm)
    why = _refusal(program, norm)
    if why:
        raise ValueError(why)
    sym = Symbolic(_with_conv_shape(program, norm.conv))
    if sym.mismatch:
        raise ValueError("its traced program changes structure with size")
    at = program_at(program, sym.target)
    eqns = program["equations"]
    names = program["input_names"]
    xn, wn = names[0], names[1]
    n, c, h, w_in = at["inputs"][0]["shape"]
    o, _, kh, kw = at["inputs"][1]["shape"]
    ho, wo = h - kh + 1, w_in - kw + 1
    out_dtype = program["out_specs"][0]["dtype"]
    isz, osz = itemsize(at["inputs"][0]["dtype"]), itemsize(out_dtype)
    cp = -(-c // 128) * 128 if c > 128 else 1 << (c - 1).bit_length()
    q_max = geometry(cp, kh)[0]
    # rows a dot: 128 // C fills the lanes with a group's input rows; fewer pad K and N less (46k's 8
    # channels: pass 2's K 768 -> 384 and N 1024 -> 512 at 8 rows a dot)
    qs = list(
        dict.fromkeys(
            q_ for q_ in (q_max, q_max // 2, q_max // 4) if q_ >= 1 and (q_ == q_max or q_ * cp >= 16)
        )
    )
    step = math.lcm(8, *(math.lcm(q_, geometry(cp, kh, q_)[2]) for q_ in qs))
    legal_rows = sorted({min(r, -(-ho // step) * step) for r in (step, 2 * step, 4 * step, 8 * step)})
    # each row group's dots and epilogue are unrolled: past 8 groups a step, the compile outgrows the
    # judge's 300 s on a busy 2-core box (22k at 32 rows a step in pass 1: 608 s)
    legal_rows = [r for r in legal_rows if r // q_max <= _MAX_GROUPS] or legal_rows[:1]
    pack = SUBLANES.get(isz, 8)
    legal_n = [b for b in (pack, 2 * pack) if n % b == 0] or [n]
    k = len(norm.sums)
    conv_out = operand(eqns[norm.conv]["outputs"][0])
    conv_dt = eqns[norm.conv]["out_specs"][0]["dtype"]

    def per_image(v: str) -> bool:
        return (_shape(at, v) or [1])[0] != 1

    # pass 1: the level-0 epilogue on the dot's whole result, channel vectors tiled over the group rows
    f32 = narrow_vpu(program)  # no bf16 vector math on the target: the epilogues in f32, rounded on store
    bind1 = {conv_out: accumulated("acc", conv_dt, f32, "[cols * nb, q * O]")}
    bind1 |= {v: f"c{i}_ref[...]  # [1, q * O]" for i, v in enumerate(norm.chan1)}
    kernel_eqns = in_f32(eqns) if f32 else eqns
    epi1 = [" " * 8 + bind(k_, v, f32) for k_, v in bind1.items()]
    in_kernel = _kernel_view(program, norm)
    epi1 += [
        " " * 8 + ln
        for ln in body_lines({"equations": [kernel_eqns[i] for i in norm.pass1]}, extra=in_kernel)
    ]
    summed = [
        "jnp.where(cols, "
        + (f"jnp.square({operand(v)}.astype(jnp.float32))" if sq else f"{operand(v)}.astype(jnp.float32)")
        + ", 0.0).reshape(wc, nb, q * o).sum(axis=0),"
        for v, sq in norm.sums
    ]
    # pass 2: conv_rows' epilogue per group row, the statistics as tiles
    bind2 = {conv_out: accumulated("acc_g", conv_dt, f32, "[Wo * nb, O]")}
    bind2 |= {v: f"s{i}" for i, v in enumerate(norm.stat2)}
    epi2 = [" " * 12 + bind(k_, v, f32) for k_, v in bind2.items()]
    epi2 += [
        " " * 12 + ln
        for ln in body_lines({"equations": [kernel_eqns[i] for i in norm.pass2]}, extra=in_kernel)
    ]
    tiles = [
        f"    s{i} = jnp.broadcast_to(s{i}_ref[...][None], (wo, nb, o)).reshape(wo * nb, o)  # [Wo * nb, O]"
        if per_image(v)
        else f"    s{i} = s{i}_ref[...]  # [1, O]"
        for i, v in enumerate(norm.stat2)
    ]
    if norm.pooled:  # pass 2 channels-in-sublanes: [O, Wo * nb] tiles, [O, 1] per channel
        tiles = [
            f"    s{i} = jnp.tile(s{i}_ref[0], (1, wo))  # [O, Wo * nb]: position (w, n) reads column n"
            if per_image(v)
            else f"    s{i} = s{i}_ref[...]  # [O, 1]"
            for i, v in enumerate(norm.stat2)
        ]
    if any("sh[" in ln for ln in epi1 + epi2):
        raise ValueError("its epilogue has a number that follows the size")
    glue = _glue(program, norm, sym, at, xn, wn)

    def passed(v: str) -> str:
        """A statistic as pass 2 reads it: [N or 1, O] (a group's value repeated over its channels)."""
        v = operand(v)
        if len(_shape(at, v) or []) == 5:  # [N or 1, G, 1, 1, 1]
            return f"jnp.repeat({v}.reshape({v}.shape[0], {v}.shape[1]), o // {v}.shape[1], axis=1)"
        return f"{v}.reshape({v}.shape[0], -1)" if per_image(v) else f"{v}.reshape(1, -1)"

    stat2_pass = ", ".join(passed(v) for v in norm.stat2)
    fixed = {
        "about": f"Convolution over a {at['inputs'][0]['dtype']} {[n, c, h, w_in]} input, stride 1, no padding; "
        f"pass 1 sums {k} values per (image, channel) over its {ho} x {wo} outputs, pass 2 recomputes it "
        f"and writes {len(norm.pass2)} epilogue ops' result through {len(norm.stat2)} statistics.",
        "target": sym.target,
        "chan1_refs": "".join(f"c{i}_ref, " for i in range(len(norm.chan1))),
        "chan1_args": "".join(f"c{i}, " for i in range(len(norm.chan1))),
        "chan1_prep": "".join(
            f"    c{i} = jnp.tile(c{i}.reshape(1, o), (1, q))  # per channel, once per group row: [1, q * O]\n"
            for i in range(len(norm.chan1))
        ),
        "chan1_specs": "pl.BlockSpec((1, q * o), ch_map), " * len(norm.chan1),
        "chan1_call": "".join(f", c{i}" for i in range(len(norm.chan1))),
        "epilogue1": "\n".join(epi1),
        "summed": "\n            ".join(summed),
        "n_sums": str(k),
        "stat2_refs": "".join(f"s{i}_ref, " for i in range(len(norm.stat2))),
        "stat2_args": "".join(f"s{i}, " for i in range(len(norm.stat2))),
        "stat2_tiles": "\n".join(tiles),
        "stat2_specs": " ".join(
            ("pl.BlockSpec((1, o, nb), nc_map)," if norm.pooled else "pl.BlockSpec((nb, o), nc_map),")
            if per_image(v)
            else ("pl.BlockSpec((o, 1), ch_map)," if norm.pooled else "pl.BlockSpec((1, o), ch_map),")
            for v in norm.stat2
        ),
        "stat2_prep": "".join(
            f"    s{i} = s{i}.reshape(n // nb, nb, o).transpose(0, 2, 1)  # [N // nb, O, nb]\n"
            if per_image(v)
            else f"    s{i} = s{i}.reshape(o, 1)\n"
            for i, v in enumerate(norm.stat2)
        ),
        "stat2_call": "".join(f", s{i}" for i in range(len(norm.stat2))),
        "stat2_pass": stat2_pass,
        "epilogue2": "\n".join(epi2),
        "result": operand(program["outputs"][0]),
        "args": ", ".join(names),
        "shapes": "".join(f"{a}.shape, " for a in names),
        "x": xn,
        "w": wn,
        "glue": "\n".join(glue),
        "out_dtype": f"jnp.{out_dtype}",
        "out_itemsize": str(osz),
        "out_channels": "1" if norm.pooled else "o",
    }
    n_nc = sum(per_image(v) for v in norm.stat2)

    def geo(cfg: Mapping[str, Any]) -> tuple[int, int, int, int, int, int]:
        """(q, hb, k1, k2, n_dim, groups): the kernels' geometry for this config; groups is the most row
        groups either pass unrolls a step."""
        q, rw, hb = geometry(cp, kh, int(cfg.get("rows_per_dot", q_max)))
        groups = max(int(cfg["block_rows"]), int(cfg["stats_block_rows"])) // q
        return q, hb, kw * (q - 1 + kh) * cp, kw * rw * cp, q * o, groups

    def vmem1(cfg: Mapping[str, Any]) -> int:
        _, hb, k1, _, n_dim, _ = geo(cfg)
        th, nb = int(cfg["stats_block_rows"]), min(int(cfg["block_n"]), n)
        rows = nb * max(1, min(wo, _CHUNK_BYTES // (4 * n_dim * nb)))
        total = 2 * nb * cp * (th + hb) * _lanes(w_in) * isz + 2 * k1 * _lanes(n_dim) * isz
        total += 2 * w_in * nb * _lanes((th + hb) * cp) * isz
        total += rows * _lanes(k1) * isz + (3 + k) * rows * _lanes(n_dim) * 4
        return int(total + 3 * k * nb * _lanes(n_dim) * 4)

    def vmem2(cfg: Mapping[str, Any]) -> int:
        _, hb, _, k2, n_dim, _ = geo(cfg)
        th, nb = int(cfg["block_rows"]), min(int(cfg["block_n"]), n)
        m = wo * nb
        total = 2 * nb * cp * (th + hb) * _lanes(w_in) * isz + 2 * th * wo * nb * _lanes(o) * osz
        total += 2 * k2 * _lanes(n_dim) * isz + 2 * w_in * nb * _lanes((th + hb) * cp) * isz
        total += m * _lanes(k2) * isz + m * _lanes(n_dim) * 4 + (n_nc + 2) * m * _lanes(o) * 4
        return int(total)

    def vmem(cfg: Mapping[str, Any], d: Mapping[str, int]) -> int:
        return max(vmem1(cfg), vmem2(cfg))

    def conv_us(th: int, nb: int, q: int, hb: int, k_dim: int, n_dim: int, out_bytes: float) -> float:
        steps = (n // nb) * -(-ho // th)
        flops = 2 * steps * (th // q) * wo * nb * _mxu(k_dim) * _mxu(n_dim)
        mxu = flops / _CLOCK_MXU * 1e6 * 1.3  # 1.3: the VMEM relayout beside it
        hbm = (n * cp * h * w_in * isz * (1 + hb / th) + out_bytes) / _HBM * 1e6
        relayout = n * cp * h * w_in * (1 + hb / th) / _RELAYOUT  # channels-last in VMEM, halo rows again
        return max(mxu, hbm) + relayout + 0.35 * steps

    out_bytes = n * (1 if norm.pooled else o) * ho * wo * osz

    def cost(cfg: Mapping[str, Any], d: Mapping[str, int]) -> float:
        """Both passes: each the MXU's passes over its dots beside its HBM traffic (pass 1 reads the
        input, pass 2 reads it and writes the output); past _MAX_GROUPS row groups a step is priced out."""
        q, hb, k1, k2, n_dim, groups = geo(cfg)
        nb = min(int(cfg["block_n"]), n)
        us = conv_us(int(cfg["stats_block_rows"]), nb, q, hb, k1, n_dim, 0)
        us += conv_us(int(cfg["block_rows"]), nb, q, hb, k2, n_dim, out_bytes)
        return us + (1e6 if vmem(cfg, d) > _MAX_VMEM or groups > _MAX_GROUPS else 0.0)

    configs = [
        {"block_rows": r, "stats_block_rows": s, "block_n": b, "rows_per_dot": q_}
        for r in legal_rows
        for s in legal_rows
        for b in legal_n
        for q_ in qs
    ]
    fitting = [cfg for cfg in configs if vmem(cfg, {}) <= _MAX_VMEM and geo(cfg)[5] <= _MAX_GROUPS]
    if not fitting:
        raise ValueError(f"its smallest blocks need more than {_MAX_VMEM // MiB} MiB of VMEM")
    initial = min(fitting, key=lambda cfg: (cost(cfg, {}), -cfg["rows_per_dot"]))  # ties: fewer, wider dots
    dims = {"N": n, "C": c, "C_out": o, "rows": ho, "W": w_in}
    tunables = {
        "block_rows": tuple(legal_rows),
        "stats_block_rows": tuple(legal_rows),
        "block_n": tuple(legal_n),
        "rows_per_dot": tuple(qs),
    }
    template = Template(
        name="conv_norm",
        operators=("program",),
        source=_pooled_source() if norm.pooled else SOURCE,
        tunables=tunables,
        dims_of=lambda sizes: dims,
        problems=check_config({k_: list(v) for k_, v in tunables.items()}),
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: dict(fixed),
        constraints=(
            f"block_rows, stats_block_rows in {legal_rows} (multiples of {step}: whole row groups and halo blocks)",
            f"block_n in {legal_n} (images per step: a sublane multiple of the output's N axis)",
            f"rows_per_dot in {qs} (output rows one dot computes; at most {_MAX_GROUPS} row groups a step)",
        ),
        grid_axes=lambda cfg: ["images", "rows"],
        semantics=lambda cfg: ["parallel", "parallel"],
    )
    return template, sym.target, dims


# pass 2 where the epilogue ends pooled over the channels (a logsumexp): the dot as [q * O, Wo * nb], so the
# epilogue's values are [O, positions] (every lane used at O = 64, where [positions, O] fills half of each
# vreg) and its result a lane-dense [1, positions] row; [Ho, Wo, N, 1] would pad the 1 to 128 lanes (46k at
# full: a 381 us transpose of the padded output, by estimate)
POOLED = (
    (
        "    wo, oc = o_ref.shape[1], o_ref.shape[3]  # oc: O, or 1 where the epilogue ends pooled over the channels\n"
        "    o = w_ref.shape[1] // q\n",
        "    wo = w - kw + 1\n    o = w_ref.shape[0] // q  # w: [q * O, KW * rw * C]; o: [1, th, 1, Wo * nb]\n",
    ),
    (
        "        acc = jnp.dot(jnp.concatenate(taps, axis=1), w_ref[...], preferred_element_type=jnp.float32)\n"
        "        for g in range(q):  # acc: [Wo * nb, q * O] f32, output row i + g in lanes g * O ...\n"
        "            acc_g = acc[:, g * o : (g + 1) * o]\n",
        "        acc = lax.dot_general(\n"
        "            w_ref[...], jnp.concatenate(taps, axis=1), (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32\n"
        "        )\n"
        "        for g in range(q):  # acc: [q * O, Wo * nb] f32, output row i + g in sublanes g * O ...\n"
        "            acc_g = acc[g * o : (g + 1) * o, :]\n",
    ),
    (
        "            o_ref[i + g] = ${result}.astype(o_ref.dtype).reshape(wo, nb, oc)\n",
        "            o_ref[0, i + g] = ${result}.astype(o_ref.dtype)  # [1, Wo * nb]\n",
    ),
    (
        "    w2 = _weights(w, q, rw, c, kh, kw)\n    last_halo = pl.cdiv(x.shape[2], hb) - 1\n",
        "    w2 = _weights(w, q, rw, c, kh, kw).T  # [q * O, K]: the dot's result has the channels in sublanes\n"
        "    last_halo = pl.cdiv(x.shape[2], hb) - 1\n${stat2_prep}",
    ),
    (
        "    def ch_map(b, r):  # a per-channel statistic [1, O]\n        return 0, 0\n\n"
        "    def nc_map(b, r):  # a per-(image, channel) statistic [N, O]: images block b\n        return b, 0\n\n"
        "    def o_map(b, r):  # [Ho, Wo, N, O]: output rows block r, images block b\n        return r, 0, b, 0\n",
        "    def ch_map(b, r):  # a per-channel statistic [O, 1]\n        return 0, 0\n\n"
        "    def nc_map(b, r):  # a per-(image, channel) statistic [N // nb, O, nb]: images block b\n        return b, 0, 0\n\n"
        "    def o_map(b, r):  # [N // nb, Ho, 1, Wo * nb]: images block b, output rows block r\n        return b, r, 0, 0\n",
    ),
    (
        "        out_shape=jax.ShapeDtypeStruct((ho, wo, n, ${out_channels}), ${out_dtype}),\n",
        "        out_shape=jax.ShapeDtypeStruct((n // nb, ho, 1, wo * nb), ${out_dtype}),\n",
    ),
    (
        "        out_specs=pl.BlockSpec((th, wo, nb, ${out_channels}), o_map),\n",
        "        out_specs=pl.BlockSpec((1, th, 1, wo * nb), o_map),\n",
    ),
    (
        "    # pass 2. w: [KW * rw * C, q * O]; o: [th, Wo, nb, O]; the statistics: [1, O] per channel, [nb, O] per image\n",
        "    # pass 2, pooled over the channels. w: [q * O, KW * rw * C]; o: [1, th, 1, Wo * nb]; the statistics:\n"
        "    # [O, 1] per channel, [1, O, nb] per image\n",
    ),
    (
        '    """Pass 2: the convolution again, its whole epilogue with the statistics, written once as [Ho, Wo, N, O]."""\n',
        '    """Pass 2: the convolution again, its whole epilogue with the statistics, pooled over the channels."""\n',
    ),
    (
        "    return jnp.transpose(out, (2, 3, 0, 1))  # [N, O, Ho, Wo]: a bitcast into TPU's layout for it\n",
        "    # [N // nb, Ho, 1, (Wo, nb)] -> [N, 1, Ho, Wo]: one small transpose of the pooled result\n"
        "    return jnp.transpose(out.reshape(n // nb, ho, wo, nb), (0, 3, 1, 2)).reshape(n, 1, ho, wo)\n",
    ),
)


def _pooled_source() -> str:
    """SOURCE with pass 2 written channels-in-sublanes (POOLED's replacements, each checked to apply)."""
    text = SOURCE
    for old, new in POOLED:
        if text.count(old) != 1:
            raise AssertionError(f"conv_norm's pooled pass 2 no longer matches its source: {old[:60]!r}")
        text = text.replace(old, new)
    return text


def _kernel_view(program: Program, norm: Norm):
    """body_lines' `extra` for the kernels' values: a reshape into or out of the group norm's view is the
    same value; a reduction over the channels (pass 2 pooled: [O, positions] values) keeps a [1, positions]
    row (max in f32: exact); a pooled broadcast is that row, or a constant one."""
    eqns = program["equations"]
    made = {e["outputs"][0]: i for i, e in enumerate(eqns) if e["outputs"]}
    views, pooled = set(norm.views), set(norm.pooled)

    def extra(e: Mapping[str, Any], expr: str) -> str:
        i = made.get(e["outputs"][0])
        if i in views:
            return operand(e["inputs"][0])
        if i not in pooled:
            return expr
        dt = e["out_specs"][0]["dtype"]
        a = operand(e["inputs"][0])
        if e["primitive"] == "reduce_max":
            return f"jnp.max({a}.astype(jnp.float32), axis=0, keepdims=True).astype(jnp.{dt})"
        if e["primitive"] == "reduce_sum":
            return f"jnp.sum({a}, axis=0, keepdims=True)"
        if e["primitive"] == "broadcast_in_dim":
            if e["inputs"][0].startswith("lit:"):
                return f"jnp.full((1, m), {a}, jnp.{dt})"
            return a  # [N, H, W] -> [N, 1, H, W]: the same row
        return expr

    return extra


def _with_conv_shape(program: Program, conv: int) -> dict[str, Any]:
    """The program with its convolution's output as one more input (at every traced size), so that a
    count over it (a batch norm's N * H' * W') is written from that shape, not searched for in H and W."""
    spec = program["equations"][conv]["out_specs"][0]
    variants = {}
    for size, v in (program.get("variants") or {}).items():
        if v.get("mismatch"):
            variants[size] = v
            continue
        shapes = (v.get("shapes") or {}).get(str(conv)) or [spec["shape"]]  # unrecorded: as traced
        variants[size] = {**v, "inputs": [*v["inputs"], {**spec, "shape": list(shapes[0])}]}
    return {
        **program,
        "inputs": [*program["inputs"], dict(spec)],
        "input_names": [*program["input_names"], "conv_output"],
        "variants": variants,
    }


def _glue(program: Program, norm: Norm, sym: Symbolic, at: Program, xn: str, wn: str) -> list[str]:
    """The statistics' equations in plain JAX: those pass 1 reads, pass 1, then the rest with each sum
    bound to pass 1's sums (a variance rewritten from the sums of a and a^2)."""
    eqns = program["equations"]
    after_sums: set[str] = set()
    first, rest = [], []
    for i in norm.glue:
        e = eqns[i]
        if i in norm.reduces or set(e["inputs"]) & after_sums:
            after_sums |= set(e["outputs"])
            rest.append(i)
        else:
            first.append(i)
    lines = ["    " + ln for ln in body_lines({"equations": [eqns[i] for i in first]}, sym=sym, mosaic=False)]
    chan1 = "".join(f", {operand(v)}" for v in norm.chan1)
    lines.append(f"    sums = stats_workload({xn}, {wn}{chan1})  # [k, N, O] f32")
    for i in rest:
        e = eqns[i]
        out = operand(e["outputs"][0])
        if i not in norm.reduces:
            lines += ["    " + ln for ln in body_lines({"equations": [e]}, sym=sym, mosaic=False)]
            continue
        red = norm.reduces[i]
        batch = norm.batch[i]
        g = norm.groups if len(_shape(program, e["inputs"][0]) or []) == 5 else 0
        dt = e["out_specs"][0]["dtype"]

        def total(j: int, batch: bool = batch) -> str:
            return f"jnp.sum(sums[{j}], axis=0)" if batch else f"sums[{j}]"

        def grouped(v: str, g: int = g) -> str:  # [N, O] -> [N, G]: a group's channels summed
            return f"{v}.reshape(n, {g}, o // {g}).sum(axis=2)" if g else v

        if red[0] == "sum":
            what = "O" if batch else "N, G" if g else "N, O"
            lines.append(f"    {out} = {grouped(total(red[1]))}.astype(jnp.{dt})  # [{what}]: pass 1's sum")
            continue
        _, ja, jq, m = red
        m = operand(m)
        shape = "o" if batch else f"{m}.shape[0], o"
        cnt = "n * count" if batch else "count"
        mean = f"{m}.astype(jnp.float32).reshape({shape})"
        if g:  # a group's mean, the same for each of its channels
            mean = f"jnp.repeat({m}.astype(jnp.float32).reshape({m}.shape[0], {g}), o // {g}, axis=1)"
        lines += [
            f"    mean_{out} = {mean}",
            f"    {out} = jnp.maximum({grouped(f'({total(jq)} - 2.0 * mean_{out} * {total(ja)} + {cnt} * mean_{out} * mean_{out})')}, 0.0)"
            f".astype(jnp.{dt})  # sum((a - m)^2) from the sums of a and a^2",
        ]
    if sym.unsolved:
        raise ValueError(f"its statistics have sizes not read from its inputs ({sym.unsolved[0]})")
    return lines
