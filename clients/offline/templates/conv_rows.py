"""A 2-D convolution (NCHW x OIHW, stride 1, no padding, one group) read and written as it lies in HBM:
no XLA transpose of the input, and an output a bitcast from the layout TPU gives such arrays.

Why: window.py moves NCHW to channels-last outside the kernel (a transpose in, a transpose out: 18k paid
~1350 us of XLA ops for it) and multiplies each tap with K = C_in, a quarter of a 256-deep MXU.

Layout: the grid walks blocks of `nb` images and `th` output rows. Each step reads its input rows and the
rows after them (the halo block) straight from NCHW, turns them channels-last in VMEM (an einshape, a 2-D
transpose per image and an image interleave), so a row of positions (w, n) holds the (row, channel) pairs
of every input row on lanes. A group of q = 128 // C_in output rows then needs one lane-aligned run of
`rw` input rows, and each kernel column kw is that run shifted by kw * nb positions (a sublane-aligned
ref slice): the group is one MXU dot [Wo * nb, KW * rw * C] @ [KW * rw * C, q * C_out], K = 768 and
N = 256 for 18k (C_in 64, C_out 128) instead of nine K = 64 dots. The weights hold zeros where a row of
the run is outside an output row's window. The result, f32, is rounded once to the conv's dtype and the
reference's per-channel epilogue runs on [Wo * nb, C_out] tiles (channels on lanes).

The kernel writes [Ho, Wo, N, C_out]: TPU keeps a bf16[N, C_out, Ho, Wo] with Wo not a lane multiple as
{1,0,3,2} (N and C_out tiled), so the final transpose to NCHW is a bitcast, not a copy. A conv whose
output feeds another kernel (conv_split) would rather write NCHW; `build` takes the core either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.op_families import (
    Core,
    accumulated,
    check_config,
    epilogue_source,
    narrow_vpu,
)
from maxkernel.clients.offline.templates.row_blocks import SUBLANES, itemsize
from maxkernel.tpu_tools.problem.emit import operand
from maxkernel.tpu_tools.problem.safe_ast import literal_eval

# The image interleave that ends each conv template's channels-last relayout (conv_rows, conv_stats, conv_norm,
# conv_depth), inside its kernel: t [nb, W, R * C] -> xs [W * nb, R * C] in 128-lane blocks, the last narrower
# where R * C is not a lane multiple (conv_stats at 8 rows a dot of 8 channels).
INTERLEAVE = """\
    for k in range(0, r * c, 128):  # interleave the images: [nb, W, 128] -> [W, nb, 128] (the last may be narrower)
        kk = min(128, r * c - k)
        xs_ref[:, k : k + kk] = pltpu.einshape("nwk->wnk", t_ref[:, :, k : k + kk]).reshape(w * nb, kk)
"""

SOURCE = (
    '''"""2-D convolution, channels-last in VMEM (offline template `conv_rows`), written from the reference's
traced program.

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
BLOCK_ROWS = ${block_rows}  # output rows per grid step (rounded up to the row group and halo)
BLOCK_N = ${block_n}  # images per grid step
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}


def _geometry(c, kh):
    """(q, rw, hb): output rows per dot (a group's rows share one lane-aligned run), input rows in that
    run, and the halo block's rows (a multiple of 8 covering the run's overhang past the group)."""
    q = 128 // c if c < 128 else 1
    rw = -(-(q - 1 + kh) // q) * q
    hb = max(8, -(-(rw - q) // 8) * 8)
    return q, rw, hb


def _kernel(x0_ref, x1_ref, w_ref, ${c_refs}o_ref, xs_ref, t_ref, *, kw, q, rw, h, last_halo):
    # x0: [nb, C, th, W] this block's input rows; x1: [nb, C, hb, W] the rows after them (the halo)
    # w: [KW * rw * C, q * O]; o: [th, Wo, nb, O]
    # t: [nb, W, R * C] each image's rows transposed; xs: [W * nb, R * C] positions (w, n) x (row, channel)
    nb, c, th, w = x0_ref.shape
    r = th + x1_ref.shape[2]
    _, wo, _, o = o_ref.shape
    keep = None
    if h % th or h % x1_ref.shape[2]:  # a partial block's rows past H are not zeros, and 0 * NaN is NaN
        blk = pl.program_id(1)
        row = lax.broadcasted_iota(jnp.int32, (1, r, 1), 1)
        halo0 = jnp.minimum((blk + 1) * (th // x1_ref.shape[2]), last_halo) * x1_ref.shape[2]
        keep = jnp.where(row < th, blk * th + row, halo0 + row - th) < h
    for n in range(nb):  # [C, R, W] -> [R, C, W] -> [(row, C), W] -> [W, (row, C)]
        xa = jnp.concatenate([x0_ref[n], x1_ref[n]], axis=1)
        if keep is not None:
            xa = jnp.where(keep, xa, jnp.zeros_like(xa))
        t_ref[n] = pltpu.einshape("chw->hcw", xa).reshape(r * c, w).T
'''
    + INTERLEAVE
    + """    m = wo * nb
    for i in range(0, th, q):  # q output rows: one dot over their run of rw input rows, KW shifts
        taps = [xs_ref[pl.ds(b * nb, m), pl.ds(i * c, rw * c)] for b in range(kw)]  # [Wo * nb, rw * C]
        acc = jnp.dot(jnp.concatenate(taps, axis=1), w_ref[...], preferred_element_type=jnp.float32)
        for g in range(q):  # acc: [Wo * nb, q * O] f32, output row i + g in lanes g * O ...
            acc_g = acc[:, g * o : (g + 1) * o]
${epilogue}
            o_ref[i + g] = ${result}.astype(o_ref.dtype).reshape(wo, nb, o)


def workload(${args}):
    n, c, h, w_in = x.shape
    o, _, kh, kw = w.shape
    ho, wo = h - kh + 1, w_in - kw + 1
    if c > 128 and c % 128:  # channels padded to a lane multiple (zero weights): not at the target size
        x = jnp.pad(x, ((0, 0), (0, -c % 128), (0, 0), (0, 0)))
        w = jnp.pad(w, ((0, 0), (0, -c % 128), (0, 0), (0, 0)))
    elif c < 128 and 128 % c:
        cp = 1 << (c - 1).bit_length()
        x = jnp.pad(x, ((0, 0), (0, cp - c), (0, 0), (0, 0)))
        w = jnp.pad(w, ((0, 0), (0, cp - c), (0, 0), (0, 0)))
    c = x.shape[1]
    q, rw, hb = _geometry(c, kh)
    step = math.lcm(8, q, hb)
    th = -(-min(BLOCK_ROWS, -(-ho // q) * q) // step) * step
    nb = BLOCK_N if n % BLOCK_N == 0 else n  # a smaller batch (check sizes): one block of all of it
    if h < th + hb:  # fewer rows than one block and its halo (check sizes): zero rows feed only cut outputs
        x = jnp.pad(x, ((0, 0), (0, 0), (0, th + hb - h), (0, 0)))
    # [O, C, KH, KW] -> [(kw, run row, C), (group row, O)]: output row g of a group reads rows g .. g + KH - 1
    mats = [jnp.pad(w, ((0, 0), (0, 0), (g, rw - kh - g), (0, 0))) for g in range(q)]
    w2 = jnp.concatenate([jnp.transpose(m, (3, 2, 1, 0)).reshape(kw * rw * c, o) for m in mats], axis=1)
${chan_prep}
    last_halo = pl.cdiv(x.shape[2], hb) - 1

    def x0_map(b, r):  # [N, C, H, W]: images block b, input rows of output block r
        return b, 0, r, 0

    def x1_map(b, r):  # the hb rows after them (clamped: past H they feed only outputs cut on store)
        return b, 0, jnp.minimum((r + 1) * (th // hb), last_halo), 0

    def w_map(b, r):  # the whole weight matrix, every step
        return 0, 0

    def ch_map(b, r):  # a per-channel vector [1, O]
        return 0, 0

    def o_map(b, r):  # [Ho, Wo, N, O]: output rows block r, images block b
        return r, 0, b, 0

    steps = (n // nb) * pl.cdiv(ho, th)
    cost = pl.CostEstimate(
        flops=int(2 * steps * (th // q) * wo * nb * w2.shape[0] * w2.shape[1]),
        transcendentals=0,
        bytes_accessed=int(
            n * c * h * w_in * x.dtype.itemsize * (1 + hb / th) + w2.size * w2.dtype.itemsize + n * o * ho * wo * ${out_itemsize}
        ),
    )
    out = pl.pallas_call(
        functools.partial(_kernel, kw=kw, q=q, rw=rw, h=x.shape[2], last_halo=last_halo),
        out_shape=jax.ShapeDtypeStruct((ho, wo, n, o), ${out_dtype}),
        grid=(n // nb, pl.cdiv(ho, th)),
        in_specs=[
            pl.BlockSpec((nb, c, th, w_in), x0_map),
            pl.BlockSpec((nb, c, hb, w_in), x1_map),
            pl.BlockSpec(w2.shape, w_map),
            ${c_specs}
        ],
        out_specs=pl.BlockSpec((th, wo, nb, o), o_map),
        scratch_shapes=[
            pltpu.VMEM((w_in * nb, (th + hb) * c), x.dtype),
            pltpu.VMEM((nb, w_in, (th + hb) * c), x.dtype),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_conv_rows",
    )(x, x, w2${c_args})
    return jnp.transpose(out, (2, 3, 0, 1))  # [N, O, Ho, Wo]: a bitcast into TPU's layout for it
"""
)

_MAX_VMEM = 48 * MiB
_CLOCK_MXU = 918e12  # v6e bf16 MXU flop/s
_HBM = 1.6e12


def _specs(text: str) -> tuple[tuple, ...]:
    found = re.findall(r"(lhs_spec|rhs_spec|out_spec)=\(([^)]*)\)", text)
    got = {k: tuple(int(x) for x in v.split(",") if x.strip()) for k, v in found}
    return got.get("lhs_spec", ()), got.get("rhs_spec", ()), got.get("out_spec", ())


def _t(text: str) -> tuple:
    v = literal_eval(text)
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def geometry(c: int, kh: int, rows_per_dot: int = 128) -> tuple[int, int, int]:
    """(q, rw, hb) as the kernel computes them (see its `_geometry`); `rows_per_dot` caps q (conv_stats'
    tunable: fewer rows a dot pad K and N less)."""
    q = min(rows_per_dot, 128 // c) if c < 128 else 1
    rw = -(-(q - 1 + kh) // q) * q
    return q, rw, max(8, -(-(rw - q) // 8) * 8)


def params_refusal(p: Mapping[str, Any], dims: int) -> str | None:
    """Why a conv equation's params are not a plain conv of `dims` spatial dims (channels first, stride 1,
    no dilation, padding or groups); None: they are. plain_refusal, conv_norm and conv_moments share it."""
    if any(s != tuple(range(dims + 2)) for s in _specs(p["dimension_numbers"])):
        return "a convolution not in " + ("NCHW / OIHW" if dims == 2 else "NCDHW / OIDHW") + " layout"
    if any(v != 1 for v in (*_t(p["window_strides"]), *_t(p["lhs_dilation"]), *_t(p["rhs_dilation"]))):
        return "a strided or dilated convolution"
    if int(p["feature_group_count"]) != 1 or int(p["batch_group_count"]) != 1:
        return "a grouped convolution"
    if any(lo or hi for lo, hi in literal_eval(p["padding"])):
        return "a padded convolution (not written yet)"
    return None


def plain_refusal(core: Core, dims: int, template: str) -> str | None:
    """Why this conv is not a plain one of `dims` spatial dims that `template` writes: channels first, stride
    1, no dilation, padding or groups, a 2- or 4-byte input, one output, an epilogue that does not read the
    conv's input (None: it is). conv_rows (2-D) and conv_depth (3-D) share it."""
    if core.family != "conv":
        return "not a convolution"
    e = core.cores[0]
    p = e["params"]
    at = core.program
    x = at["inputs"][at["input_names"].index(operand(e["inputs"][0]))]
    if len(x["shape"]) != dims + 2:
        return f"a {len(x['shape']) - 2}-D convolution ({template} writes {dims}-D)"
    why = params_refusal(p, dims)
    if why:
        return why
    if itemsize(x["dtype"]) not in (2, 4):
        return f"{x['dtype']} inputs"
    src = operand(e["inputs"][0])
    if any(src in f["inputs"] for f in core.epilogue):
        return "its epilogue reads the convolution's input"
    if len(at["outputs"]) != 1:
        return "several outputs"
    return None


def refusal(core: Core) -> str | None:
    """Why this conv program is outside the template (None: inside)."""
    why = plain_refusal(core, 2, "conv_rows")
    if why:
        return why
    at = core.program
    c = at["inputs"][at["input_names"].index(operand(core.cores[0]["inputs"][0]))]["shape"][1]
    if not (c % 128 == 0 or 128 % c == 0):
        return f"{c} input channels: neither a divisor nor a multiple of 128 lanes"
    return None


def build(core: Core) -> tuple[Template, str, dict[str, int]]:
    """(the template, its target size, its dims) of a 2-D NCHW convolution with an elementwise epilogue;
    ValueError with the reason when the conv is outside what it writes (window.py then takes it)."""
    why = refusal(core)
    if why:
        raise ValueError(why)
    at = core.program
    e = core.cores[0]
    x = at["inputs"][at["input_names"].index(operand(e["inputs"][0]))]
    wshape = at["inputs"][at["input_names"].index(operand(e["inputs"][1]))]["shape"]
    n, c, h, w_in = x["shape"]
    o, _, kh, kw = wshape
    ho, wo = h - kh + 1, w_in - kw + 1
    out_dtype = _output_dtype(core)
    isz, osz = itemsize(x["dtype"]), itemsize(out_dtype)
    q, rw, hb = geometry(c, kh)
    step = math.lcm(8, q, hb)
    legal_rows = sorted({min(r, -(-ho // step) * step) for r in (step, 2 * step, 4 * step, 8 * step)})
    pack = SUBLANES.get(isz, 8)  # a kw shift of nb positions stays on whole (packed) sublane tiles
    legal_n = [b for b in (pack, 2 * pack) if n % b == 0] or [n]
    k_dim, n_dim = kw * rw * c, q * o

    def lanes(v: int) -> int:
        return -(-v // 128) * 128

    def vmem(cfg: Mapping[str, Any], d: Mapping[str, int]) -> int:
        th, nb = int(cfg["block_rows"]), min(int(cfg["block_n"]), n)
        m = wo * nb
        total = 2 * nb * c * (th + hb) * lanes(w_in) * isz  # x0 and the halo, double-buffered
        total += 2 * th * wo * nb * lanes(o) * osz  # the output block, double-buffered
        total += 2 * k_dim * lanes(n_dim) * isz  # the weights
        total += 2 * w_in * nb * lanes((th + hb) * c) * isz  # xs and t
        total += m * lanes(k_dim) * isz + m * lanes(n_dim) * 4  # one group's taps, its f32 result
        return int(total)

    def cost(cfg: Mapping[str, Any], d: Mapping[str, int]) -> float:
        """MXU time of the padded dots (a 256-wide array: N under 256 leaves part idle) beside the HBM
        time of the input (with its halo) and output; a step costs 0.35 us at least."""
        th, nb = int(cfg["block_rows"]), min(int(cfg["block_n"]), n)
        steps = (n // nb) * -(-ho // th)
        flops = 2 * steps * (th // q) * wo * nb * k_dim * n_dim
        mxu = flops / (_CLOCK_MXU * min(n_dim, 256) / 256) * 1e6 * 1.3  # 1.3: the VMEM relayout beside it
        hbm = (n * c * h * w_in * isz * (1 + hb / th) + n * o * ho * wo * osz) / _HBM * 1e6
        penalty = 1e6 if vmem(cfg, d) > _MAX_VMEM else 0.0
        return max(mxu, hbm) + 0.35 * steps + penalty

    configs = [{"block_rows": r, "block_n": b} for r in legal_rows for b in legal_n]
    fitting = [cfg for cfg in configs if vmem(cfg, {}) <= _MAX_VMEM]
    if not fitting:
        least = min(vmem(cfg, {}) for cfg in configs)
        raise ValueError(f"its smallest block needs {least / MiB:.0f} MiB of VMEM (> {_MAX_VMEM // MiB} MiB)")
    initial = min(fitting, key=lambda cfg: cost(cfg, {}))
    fixed = _source_parts(core, out_dtype)
    fixed["target"] = core.target
    dims = {"N": n, "C": c, "C_out": o, "rows": ho, "W": w_in}
    template = Template(
        name="conv_rows",
        operators=("program",),
        source=SOURCE,
        tunables={"block_rows": tuple(legal_rows), "block_n": tuple(legal_n)},
        dims_of=lambda sizes: dims,
        problems=check_config({"block_rows": legal_rows, "block_n": legal_n}),
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: dict(fixed),
        constraints=(
            f"block_rows in {legal_rows} (multiples of {step}: whole row groups and halo blocks)",
            f"block_n in {legal_n} (images per step: a sublane multiple of the output's N axis)",
        ),
        grid_axes=lambda cfg: ["images", "rows"],
        semantics=lambda cfg: ["parallel", "parallel"],
    )
    return template, core.target, dims


def _output_dtype(core: Core) -> str:
    """The dtype of the program's one output (the epilogue's last value, or the conv's own)."""
    name = operand(core.program["outputs"][0]) if core.program["outputs"] else ""
    for eq in [*core.cores, *core.epilogue]:
        if name in eq["outputs"]:
            return eq["out_specs"][eq["outputs"].index(name)]["dtype"]
    return core.cores[0]["out_specs"][0]["dtype"]


def _source_parts(core: Core, out_dtype: str) -> dict[str, str]:
    e = core.cores[0]
    conv_dt = e["out_specs"][0]["dtype"]
    names = {
        operand(e["outputs"][0]): accumulated("acc_g", conv_dt, narrow_vpu(core.program), "[Wo * nb, O]")
    }
    names |= {ch: f"c{i}_ref[...]  # [1, O]" for i, ch in enumerate(core.channels)}
    epi, results = epilogue_source(core, names, indent=" " * 12)
    if len(results) != 1:
        raise ValueError("it has several outputs; conv_rows writes one")
    ins = core.program["input_names"]
    if [operand(a) for a in e["inputs"]] + core.channels != ins:
        raise ValueError("its inputs are not the conv's operands then its per-channel vectors, in order")
    nc = len(core.channels)
    x = core.program["inputs"][0]
    return {
        "about": f"Convolution over a {x['dtype']} {x['shape']} input, stride 1, no padding, then the "
        "reference's elementwise epilogue per output row, channels on lanes.",
        "c_refs": "".join(f"c{i}_ref, " for i in range(nc)),
        "epilogue": "\n".join(epi),
        "result": results[0],
        "args": ", ".join(["x", "w", *(f"c{i}" for i in range(nc))]),
        "chan_prep": "".join(
            f"    cl{i} = c{i}.reshape(1, o)  # per-channel vector: [1, O]\n" for i in range(nc)
        ),
        "c_specs": "pl.BlockSpec((1, o), ch_map), " * nc,
        "c_args": "".join(f", cl{i}" for i in range(nc)),
        "out_dtype": f"jnp.{out_dtype}",
        "out_itemsize": str(itemsize(out_dtype)),
    }
