"""Pooling (max/min/sum-average, 1-3D) and convolution (1-3D, grouped, depthwise, strided, dilated) as
Pallas kernels over a channels-last layout.

Layout: the NC+spatial input is moved to [N, G, S..., C] outside the kernel (a transpose, and a pad only
when the window pads: data movement, no arithmetic), so channels sit on lanes and the last spatial axis on
sublanes. The grid walks the first spatial axis in blocks of output rows; each step reads its block of
input rows and, through a second BlockSpec on the same array, the few rows after it that its last outputs
need (the halo: the smallest block that tiles a block's rows and covers the window's overlap), copies both
into one VMEM scratch, and builds the block's outputs from the window's taps: one strided load of the
scratch per tap (a 32-bit scratch when a stride is not 1: Mosaic's strided loads take 32-bit data). A
pool folds the taps with max/min/add in f32; a convolution multiplies each tap, its rows flattened to
[rows, C_in], by the tap's [C_in, C_out] weights on the MXU into an f32 accumulator; a depthwise
convolution multiplies lane by lane on the VPU. Outputs along the last spatial axis are computed to a
sublane multiple (a flatten without a relayout) and cut on store.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.op_families import Core, check_config, epilogue_source
from maxkernel.clients.offline.templates.row_blocks import SUBLANES, itemsize
from maxkernel.tpu_tools.problem.emit import operand
from maxkernel.tpu_tools.problem.safe_ast import literal_eval

HEADER = '''"""${title} (offline template `${name}`), written from the reference's traced program.

${about}

Shape-generic: every shape is read from the inputs when the kernel is traced; the block sizes were
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
BLOCK_ROWS = ${block_rows}  # output positions along the first spatial axis per grid step
BLOCK_C = ${block_c}  # output channels (lanes) per grid step
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
K = ${k}  # spatial axes
WINDOW = ${window}  # per spatial axis
STRIDES = ${strides}
DILATION = ${dilation}
PADDING = ${padding}  # (low, high) per spatial axis
GROUPS = ${groups}
PAD_VALUE = ${pad_value}
ROW_ALIGN = ${row_align}  # sublane multiple of a block of rows when they sit on sublanes (K == 1)
'''

KERNEL = """

def _kernel(x0_ref, x1_ref, ${w_ref}${c_refs}o_ref, buf_ref, *, out_w):
    # out_w: the outputs along the last spatial axis, computed padded to a sublane multiple (stored cut)
    # x0: [rows_in, ${x_tile}] this step's input rows; x1: [halo_rows, ...] the rows after them
    # (unpadded input: the scratch is wider than a block on the last spatial axis; its tail, like a
    # partial block's rows, feeds only outputs that are cut on store)
    rows_in, halo_rows, w_in = x0_ref.shape[2], x1_ref.shape[2], x0_ref.shape[-2]
    inner = (slice(None),) * (K - 2) + (slice(0, w_in), slice(None)) if K > 1 else (slice(None),)
    buf_ref[(slice(0, rows_in), *inner)] = x0_ref[0, 0].astype(buf_ref.dtype)
    buf_ref[(slice(rows_in, rows_in + halo_rows), *inner)] = x1_ref[0, 0].astype(buf_ref.dtype)
${body}
"""

BODY = """    th = o_ref.shape[2]  # output rows of this block
    out_block = (*o_ref.shape[2:-2], out_w, o_ref.shape[-1]) if K > 1 else o_ref.shape[2:]
    # out_block: [th, other spatial..., out_w, block_c]
    acc = ${acc_init}  # ${acc_shape} f32
${taps}
${epilogue}
    o_ref[0, 0] = ${result}${to_block}[..., : o_ref.shape[-2], :].astype(o_ref.dtype)
"""

WORKLOAD = """

def workload(${args}):
    n, c, *sp = x.shape  # N, C, spatial...
${channels}
    out_sp = [
        (sp[i] + PADDING[i][0] + PADDING[i][1] - DILATION[i] * (WINDOW[i] - 1) - 1) // STRIDES[i] + 1 for i in range(K)
    ]
    # K == 1: rows are sublanes, so a block is a multiple of ROW_ALIGN (the last one may run past the output)
    th = min(BLOCK_ROWS, pl.cdiv(out_sp[0], ROW_ALIGN) * ROW_ALIGN if K == 1 else out_sp[0])
    bc = min(BLOCK_C, c_out)
    n_blk = pl.cdiv(out_sp[0], th)
    rows_in = th * STRIDES[0]  # input rows behind one block of output rows
    halo = max(1, DILATION[0] * (WINDOW[0] - 1) + 1 - STRIDES[0])  # rows past the block its last outputs read
    # the halo block: the smallest block that tiles rows_in and covers the halo (sublane-aligned when K == 1)
    halo_rows = min(
        (d for d in range(1, rows_in + 1) if rows_in % d == 0 and d >= halo and (K > 1 or d % ROW_ALIGN == 0)),
        default=rows_in,
    )
    if halo > halo_rows:
        raise ValueError(f"{th} output rows per block are too few for the window's halo; raise BLOCK_ROWS")
    # [N, G, S..., Cg]: channels on lanes (a transpose: data movement only)
    xl = jnp.moveaxis(x.reshape(n, groups_x, cg, *sp), 2, -1)
    # the last spatial axis: outputs computed to a sublane multiple, so a tap's [th, ..., out_w, C] rows
    # flatten for the MXU without a relayout; the scratch holds the input rows those outputs read
    out_w = pl.cdiv(out_sp[-1], ROW_ALIGN) * ROW_ALIGN if K > 1 else th
    need_w = (out_w - 1) * STRIDES[-1] + DILATION[-1] * (WINDOW[-1] - 1) + 1
    if any(lo or hi for lo, hi in PADDING):
        # the window's padding, the first axis grown (or cut) to whole blocks and the last halo, and the
        # last axis to need_w: one pad (lax.pad takes a negative high)
        rows_pad = n_blk * rows_in + halo_rows
        pads = [(0, 0, 0), (0, 0, 0), (PADDING[0][0], rows_pad - sp[0] - PADDING[0][0], 0)]
        pads += [(lo, hi, 0) for lo, hi in PADDING[1:]] + [(0, 0, 0)]
        if K > 1:
            lo, hi = PADDING[-1]
            pads[-2] = (lo, max(hi, need_w - sp[-1] - lo), 0)
        xl = lax.pad(xl, jnp.asarray(PAD_VALUE, xl.dtype), pads)
    # unpadded: the last blocks may run past the rows (partial, or the halo clamped to the last block):
    # only outputs past the valid ones read those rows, and they are cut on store
    last_halo = pl.cdiv(xl.shape[2], halo_rows) - 1
    rest_in = xl.shape[3:-1]  # the other spatial axes
    buf_rest = (*rest_in[:-1], max(rest_in[-1], need_w)) if K > 1 else ()
${weights}${chan_prep}
    grid = (n, groups_x, pl.cdiv(c_out, bc), n_blk)

    def x0_map(b, g, j, r):  # [N, G, S..., Cg]: this block of rows, all its other axes and channels
        return (b, ${x_group}, r) + (0,) * len(rest_in) + (${x_chan},)

    def x1_map(b, g, j, r):  # the halo: the first halo_rows rows after this block
        return (b, ${x_group}, jnp.minimum((r + 1) * (rows_in // halo_rows), last_halo)) + (0,) * len(rest_in) + (
            ${x_chan},
        )

    def o_map(b, g, j, r):  # [N, G, S_out..., C_out]: this block of output rows, channel block j
        return (b, g, r) + (0,) * (K - 1) + (j,)

    in_block = (1, 1, rows_in, *rest_in, ${x_block_c})
    cost = pl.CostEstimate(
        flops=int(${flops_expr}),
        transcendentals=0,
        bytes_accessed=int((1 + halo_rows / rows_in) * xl.size * xl.dtype.itemsize + ${w_bytes}n * c_out * math.prod(out_sp) * ${out_itemsize}),
    )
    out = pl.pallas_call(
        functools.partial(_kernel, out_w=out_w),
        out_shape=jax.ShapeDtypeStruct((n, groups_x, *out_sp, c_out), ${out_dtype}),  # a last partial block is cut
        grid=grid,
        in_specs=[
            pl.BlockSpec(in_block, x0_map),
            pl.BlockSpec((1, 1, halo_rows, *in_block[3:]), x1_map),
            ${w_spec}${c_specs}
        ],
        out_specs=pl.BlockSpec((1, 1, th, *out_sp[1:], bc), o_map),
        scratch_shapes=[pltpu.VMEM((rows_in + halo_rows, *buf_rest, ${x_block_c}), ${buf_dtype})],  # rows + halo
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "parallel"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_${name}",
    )(xl, xl${w_arg}${c_args})
    # [N, G, S_out..., C_out] -> [N, G * C_out, S_out...]
    return jnp.moveaxis(out, -1, 2).reshape(n, groups_x * c_out, *out_sp)
"""

_INITIAL_VMEM = 24 * MiB
_MAX_VMEM = 48 * MiB


def _specs(text: str) -> tuple[tuple, tuple, tuple]:
    found = re.findall(r"(lhs_spec|rhs_spec|out_spec)=\(([^)]*)\)", text)
    got = {k: tuple(int(x) for x in v.split(",") if x.strip()) for k, v in found}
    return got.get("lhs_spec", ()), got.get("rhs_spec", ()), got.get("out_spec", ())


def _t(text: str) -> tuple:
    v = literal_eval(text)
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def _pow2_blocks(n: int, align: int, top: int) -> list[int]:
    out, b = [], align
    while b < n and b <= top:
        out.append(b)
        b *= 2
    return [*out, n] if n <= top or not out else out


def build(core: Core) -> tuple[Template, str, dict[str, int]]:
    """(the template, its target size, its dims) of a pooling or convolution program."""
    at = core.program
    e = core.cores[0]
    p = e["params"]
    xname = operand(e["inputs"][0])
    xspec = at["inputs"][at["input_names"].index(xname)]
    shape, dtype = list(xspec["shape"]), xspec["dtype"]
    rank = len(shape)
    k = rank - 2
    if k not in (1, 2, 3):
        raise ValueError(f"a {rank}-D operand: the window template takes N, C and 1-3 spatial axes")
    out_spec = e["out_specs"][0]
    if core.family == "pool":
        win, strides = _t(p["window_dimensions"]), _t(p["window_strides"])
        pads = [tuple(x) for x in literal_eval(p["padding"])]
        base, wdil = _t(p["base_dilation"]), _t(p["window_dilation"])
        if win[:2] != (1, 1) or strides[:2] != (1, 1) or pads[:2] != [(0, 0), (0, 0)]:
            raise ValueError(
                "its window spans the batch or channel axis (the template pools NC+spatial inputs)"
            )
        if any(b != 1 for b in base):
            raise ValueError("its reduce_window dilates the input (base_dilation)")
        window, stride, dilation, padding = win[2:], strides[2:], wdil[2:], pads[2:]
        groups, depthwise = 1, True
        c = shape[1]
        c_out = c
        kind = e["primitive"].removeprefix("reduce_window_")
    else:
        lhs, rhs, outs = _specs(p["dimension_numbers"])
        ident = tuple(range(rank))
        if lhs != ident or rhs != ident or outs != ident:
            raise ValueError("a convolution not in NC+spatial / OI+spatial layout")
        if any(v != 1 for v in _t(p["lhs_dilation"])):
            raise ValueError("a transposed convolution (lhs_dilation): not written yet")
        if int(p["batch_group_count"]) != 1:
            raise ValueError("a convolution with batch_group_count > 1")
        wname = operand(e["inputs"][1])
        wshape = at["inputs"][at["input_names"].index(wname)]["shape"]
        window, stride, dilation = tuple(wshape[2:]), _t(p["window_strides"]), _t(p["rhs_dilation"])
        padding = [tuple(x) for x in literal_eval(p["padding"])]
        groups = int(p["feature_group_count"])
        c, o = shape[1], wshape[0]
        depthwise = groups == c and groups > 1
        if depthwise and o != c:
            raise ValueError("a depthwise convolution with a channel multiplier: not written yet")
        c_out = c if depthwise else o // groups
        kind = "depthwise" if depthwise else "conv"
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        raise ValueError("negative padding")
    sp = shape[2:]
    out_sp = list(out_spec["shape"][2:])
    strided = any(v > 1 for v in stride)  # Mosaic's strided loads take 32-bit data: an f32 scratch
    buf_dtype = "jnp.float32" if (strided or kind != "conv" or itemsize(dtype) != 2) else f"jnp.{dtype}"
    halo = (window[0] - 1) * dilation[0] + 1 - stride[0]  # rows past a block that its last output reads
    min_th = max(1, -(-halo // stride[0])) if halo > 0 else 1
    lanes_in = c if (kind != "conv") else c // groups
    sub_out = SUBLANES.get(itemsize(out_spec["dtype"]), 8)
    sub_in = SUBLANES.get(itemsize(dtype), 8)
    if k == 1:  # rows are the sublane axis: blocks of out rows (and their input rows) must be aligned
        legal_rows = [
            t
            for t in _pow2_blocks(out_sp[0], sub_out, 4096)
            if t >= min_th and (t == out_sp[0] or (t * stride[0]) % sub_in == 0)
        ]
        if out_sp[0] >= min_th and out_sp[0] not in legal_rows and out_sp[0] <= 4096:
            legal_rows.append(out_sp[0])
    else:
        legal_rows = [t for t in (1, 2, 4, 8, 16, 32, 64) if min_th <= t < out_sp[0]]
        legal_rows += [out_sp[0]] if min_th <= out_sp[0] <= 64 else []
    legal_c = _pow2_blocks(c_out, 128, 512)
    if not legal_rows:
        raise ValueError(
            f"no block of output rows covers the window's halo ({halo} rows) at {out_sp[0]} rows"
        )

    def lanes(n: int) -> int:
        return -(-n // 128) * 128

    rest_in = [s + lo + hi for s, (lo, hi) in zip(sp[1:], padding[1:], strict=True)]
    w_last = (sp[0] + sum(padding[0])) if k == 1 else rest_in[-1]
    buf_item = 4 if buf_dtype == "jnp.float32" else 2

    def vmem(cfg: Mapping[str, Any], d: Mapping[str, int]) -> int:
        th, bc = min(int(cfg["block_rows"]), out_sp[0]), min(int(cfg["block_c"]), c_out)
        lane_in = lanes(bc if kind != "conv" else lanes_in)
        rows_in = th * stride[0]
        halo_rows = min(
            (r for r in range(1, rows_in + 1) if rows_in % r == 0 and r >= max(1, halo)), default=rows_in
        )

        def x_blk(r: int) -> int:  # elements of a block of r input rows, in its (8, 128) tiles
            if k == 1:
                return -(-r // 8) * 8 * lane_in
            return r * math.prod(rest_in[:-1]) * (-(-rest_in[-1] // 8) * 8) * lane_in

        # x0 and the halo block, double-buffered, and the scratch holding both
        total = (
            2 * (x_blk(rows_in) + x_blk(halo_rows)) * itemsize(dtype) + x_blk(rows_in + halo_rows) * buf_item
        )
        out_blk = th * math.prod(out_sp[1:]) * lanes(bc) if k > 1 else -(-th // 8) * 8 * lanes(bc)
        total += 2 * out_blk * itemsize(out_spec["dtype"])
        if kind == "conv":
            total += 2 * math.prod(window) * (-(-lanes_in // 8) * 8) * lanes(bc) * itemsize(dtype)
        elif kind == "depthwise":
            total += 2 * math.prod(window) * 8 * lanes(bc) * itemsize(dtype)
        rows = th * math.prod(out_sp[1:-1]) * (-(-out_sp[-1] // 8) * 8) if k > 1 else -(-th // 8) * 8
        total += 2 * rows * lanes(bc) * 4  # the f32 accumulator and a tap's product
        total += rows * lane_in * 4  # a tap's rows
        return int(total)

    n = shape[0]
    taps = math.prod(window)
    out_elems = n * groups * math.prod(out_sp) * c_out if kind == "conv" else n * math.prod(out_sp) * c_out
    hbm = 2 * math.prod(shape) * itemsize(dtype) + out_elems * itemsize(out_spec["dtype"])
    mxu = 2 * out_elems * taps * (lanes_in if kind == "conv" else 1)

    def cost(cfg: Mapping[str, Any], d: Mapping[str, int]) -> float:
        th, bc = min(int(cfg["block_rows"]), out_sp[0]), min(int(cfg["block_c"]), c_out)
        steps = n * groups * -(-c_out // bc) * -(-out_sp[0] // th)
        rows = steps * th * math.prod(out_sp[1:-1]) if k > 1 else steps
        flops = mxu / 900e12 * 1e6 if kind == "conv" else out_elems * taps / 1024 / 1e3 * 2
        penalty = 1e6 if vmem(cfg, d) > _MAX_VMEM else 0.0
        return hbm / 1.6e12 * 1e6 + 0.35 * steps + rows * taps * 0.01 + flops + penalty

    fixed = _source_parts(
        core, kind, k, window, stride, dilation, padding, groups, dtype, out_spec, buf_dtype
    )
    fixed["target"] = core.target
    name = "pool" if core.family == "pool" else "conv"
    configs = [{"block_rows": r, "block_c": b} for r in legal_rows for b in legal_c]
    least = min(vmem(cfg, {}) for cfg in configs)
    if least > _MAX_VMEM:
        raise ValueError(
            f"its smallest block needs {least / MiB:.0f} MiB of VMEM (> {_MAX_VMEM // MiB} MiB): the window "
            "template keeps whole planes of the other spatial axes per block, and blocking them is not written yet"
        )
    fitting = [cfg for cfg in configs if vmem(cfg, {}) <= _INITIAL_VMEM] or configs[:1]
    initial = min(fitting, key=lambda cfg: (cost(cfg, {}), -cfg["block_c"]))
    dims = {"N": n, "C": c, "C_out": c_out, "rows": out_sp[0], "W": w_last}
    template = Template(
        name=name,
        operators=("program",),
        source=HEADER + fixed.pop("source"),
        tunables={"block_rows": tuple(legal_rows), "block_c": tuple(legal_c)},
        dims_of=lambda sizes: dims,
        problems=check_config({"block_rows": legal_rows, "block_c": legal_c}),
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: {**fixed, "name": name},
        constraints=(
            f"block_rows in {legal_rows} (at least {min_th}: a block's halo fits in the next block)",
            f"block_c in {legal_c} (lanes)",
        ),
        grid_axes=lambda cfg: ["batch", "group", "channels", "rows"],
        semantics=lambda cfg: ["parallel"] * 4,
    )
    return template, core.target, dims


def _source_parts(
    core, kind, k, window, stride, dilation, padding, groups, dtype, out_spec, buf_dtype
) -> dict:
    """The kernel's text pieces (the `source` key: the body below the header, with its own placeholders)."""
    e = core.cores[0]
    out_dt = f"jnp.{out_spec['dtype']}"
    pool_init = {"max": "-jnp.inf", "min": "jnp.inf", "sum": "0.0"}
    # a pool or depthwise conv folds taps elementwise on [th, ..., out_w, lanes]; a conv multiplies each
    # tap, its rows flattened to [th * ... * out_w, cg], by the tap's [cg, block_c] weights on the MXU
    if kind in ("max", "min", "sum"):
        acc_init = f"jnp.full(out_block, {pool_init[kind]}, jnp.float32)"
        fold = {"max": "jnp.maximum(acc, {v})", "min": "jnp.minimum(acc, {v})", "sum": "acc + {v}"}[kind]
        pad_value = {"max": "-jnp.inf", "min": "jnp.inf", "sum": "0.0"}[kind]
    elif kind == "depthwise":
        acc_init = "jnp.zeros(out_block, jnp.float32)"
        pad_value = "0.0"
        fold = "acc + {v} * w_ref[{wtap}].astype(jnp.float32)"
    else:
        acc_init = "jnp.zeros((math.prod(out_block[:-1]), out_block[-1]), jnp.float32)"
        pad_value = "0.0"
        fold = "acc + jnp.dot({v}.reshape(acc.shape[0], -1), w_ref[0, {tap}], preferred_element_type=jnp.float32)"
    load_cast = (
        ".astype(jnp.float32)"
        if kind != "conv"
        else (f".astype(jnp.{dtype})" if buf_dtype != f"jnp.{dtype}" else "")
    )
    taps = []
    extents = {1: ["th"], 2: ["th", "out_w"], 3: ["th", "out_block[1]", "out_w"]}[k]  # the output block's
    for tap in _taps(window):
        idx = [
            f"pl.ds({t * d}, {n}, stride={s})"
            for t, d, n, s in zip(tap, dilation, extents, stride, strict=True)
        ]
        v = f"buf_ref[{', '.join(idx)}, :]{load_cast}"
        taps.append(f"    v = {v}  # [{', '.join(extents)}, lanes]: tap {tap}")
        wtap = ", ".join([*map(str, tap[:-1]), f"pl.ds({tap[-1]}, 1), :"])  # [1, lanes]
        taps.append(f"    acc = {fold.format(v='v', tap=', '.join(map(str, tap)), wtap=wtap)}")
    names = {operand(e["outputs"][0]): f"acc.astype({out_dt})"}
    names |= {c: f"c{i}_ref[0]  # [1, lanes]" for i, c in enumerate(core.channels)}
    epi, results = epilogue_source(core, names, indent="    ")
    if len(results) != 1:
        raise ValueError("it has several outputs; the window template writes one")
    body_text = BODY
    for key, val in {
        "acc_init": acc_init,
        "acc_shape": "[th * ... * out_w, block_c]" if kind == "conv" else "[th, ..., out_w, block_c]",
        "taps": "\n".join(taps),
        "epilogue": "\n".join(epi),
        "result": results[0],
        "to_block": ".reshape(out_block)" if kind == "conv" else "",
    }.items():
        body_text = body_text.replace("${" + key + "}", val)
    if kind == "conv":
        channels = "    o = w.shape[0]\n    groups_x, cg, c_out = GROUPS, c // GROUPS, o // GROUPS"
        weights = (
            "    # [O, Cg, window...] -> [G, window..., Cg, C_out]: each tap's [Cg, C_out] matrix\n"
            "    wl = jnp.moveaxis(w.reshape(GROUPS, c_out, cg, *w.shape[2:]), (1, 2), (-1, -2))\n"
            "    w_block = (1, *WINDOW, cg, bc)\n\n"
            "    def w_map(b, g, j, r):  # [G, window..., Cg, C_out]: group g, channel block j\n"
            "        return (g,) + (0,) * (K + 1) + (j,)\n"
        )
        x_group, x_chan, x_block_c = "g", "0", "cg"
        flops = "2 * n * GROUPS * c_out * math.prod(out_sp) * cg * math.prod(WINDOW)"
        w_spec, w_arg, w_ref, w_bytes = (
            "pl.BlockSpec(w_block, w_map), ",
            ", wl",
            "w_ref, ",
            "wl.size * wl.dtype.itemsize + ",
        )
        x_tile = "other spatial..., cg"
        args = "x, w"
    elif kind == "depthwise":
        channels = "    groups_x, cg, c_out = 1, c, c  # channels stay on lanes: one group of all of them"
        weights = (
            "    # [C, 1, window...] -> [window..., C]: each tap's per-channel weights on lanes\n"
            "    wl = jnp.moveaxis(w.reshape(c, *w.shape[2:]), 0, -1)\n"
            "    w_block = (*WINDOW, bc)\n\n"
            "    def w_map(b, g, j, r):  # [window..., C]: channel block j\n"
            "        return (0,) * K + (j,)\n"
        )
        x_group, x_chan, x_block_c = "0", "j", "bc"
        flops = "2 * n * c * math.prod(out_sp) * math.prod(WINDOW)"
        w_spec, w_arg, w_ref, w_bytes = (
            "pl.BlockSpec(w_block, w_map), ",
            ", wl",
            "w_ref, ",
            "wl.size * wl.dtype.itemsize + ",
        )
        x_tile = "other spatial..., block_c"
        args = "x, w"
    else:
        channels = "    groups_x, cg, c_out = 1, c, c  # channels stay on lanes"
        weights = ""
        x_group, x_chan, x_block_c = "0", "j", "bc"
        flops = "n * c * math.prod(out_sp) * math.prod(WINDOW)"
        w_spec = w_arg = w_ref = w_bytes = ""
        x_tile = "other spatial..., block_c"
        args = "x"
    nc = len(core.channels)
    args += "".join(f", c{i}" for i in range(nc))
    chan_prep = "".join(
        f"    cl{i} = c{i}.reshape(groups_x, 1, c_out)  # per-channel vector: [G, 1, C_out]\n"
        for i in range(nc)
    )
    if nc:
        chan_prep += "\n    def ch_map(b, g, j, r):  # [G, 1, C_out]: group g, channel block j\n        return g, 0, j\n"
    workload = WORKLOAD
    for key, val in {
        "chan_prep": chan_prep,
        "c_specs": "pl.BlockSpec((1, 1, bc), ch_map), " * nc,
        "c_args": "".join(f", cl{i}" for i in range(nc)),
        "channels": channels,
        "weights": weights,
        "x_group": x_group,
        "x_chan": x_chan,
        "x_block_c": x_block_c,
        "flops_expr": flops,
        "w_spec": w_spec,
        "w_arg": w_arg,
        "w_bytes": w_bytes,
        "args": args,
        "out_dtype": out_dt,
        "buf_dtype": buf_dtype,
        "out_itemsize": str(itemsize(out_spec["dtype"])),
    }.items():
        workload = workload.replace("${" + key + "}", val)
    kernel = (
        KERNEL.replace("${w_ref}", w_ref)
        .replace("${c_refs}", "".join(f"c{i}_ref, " for i in range(nc)))
        .replace("${x_tile}", x_tile)
        .replace("${body}", body_text.rstrip())
    )
    ins = core.program["input_names"]
    if [operand(a) for a in e["inputs"]] + core.channels != ins:
        raise ValueError("its inputs are not the op's operands then its per-channel vectors, in order")
    what = {
        "max": "Max pool", "min": "Min pool", "sum": "Sum pool", "conv": "Convolution",
        "depthwise": "Depthwise convolution",
    }[kind]  # fmt: skip
    return {
        "source": kernel + workload,
        "k": str(k),
        "window": repr(tuple(window)),
        "strides": repr(tuple(stride)),
        "dilation": repr(tuple(dilation)),
        "padding": repr(tuple(tuple(x) for x in padding)),
        "groups": str(groups),
        "pad_value": pad_value,
        "row_align": str(max(SUBLANES.get(itemsize(dtype), 8), SUBLANES.get(itemsize(out_spec["dtype"]), 8))),
        "title": f"{what} {k}-D, window {tuple(window)}, stride {tuple(stride)}",
        "about": f"{what} over a {dtype} {core.program['inputs'][0]['shape']} input (window {tuple(window)}, "
        f"stride {tuple(stride)}, dilation {tuple(dilation)}, padding {tuple(tuple(x) for x in padding)}"
        + (f", {groups} groups" if groups > 1 else "")
        + "), channels-last: a transpose and a pad move the data, the kernel does every tap.",
    }


def _taps(window) -> list[tuple[int, ...]]:
    import itertools

    return list(itertools.product(*(range(w) for w in window)))
