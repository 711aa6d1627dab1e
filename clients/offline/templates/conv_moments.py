"""A convolution whose output is only ever summed, through ops of degree <= 2 in it (a group or instance
norm's statistics, an affine map, a mean over everything): one kernel takes each (image, channel)'s sum
of y and of y^2 over the conv's output positions, and the program runs on those sums, never on y.

Why: 25k (conv3d of 3 channels, GroupNorm, mean per image) writes 122 MB of conv output for a 128-value
answer. Every value the program makes from the conv output y is c0 + c1 y + c2 y^2 per (image, channel)
(c the statistics and per-channel vectors; y in f32, its dtype roundings not kept: closer to the upcast
oracle), so a sum over the output positions is c0 P + c1 S1 + c2 S2. `plan` proves that from the traced program
(refusing any other op on y) and the module evaluates the program on those forms (`_P` below), in plain
JAX on [N, O]-sized values.

The kernel: `block_n` images a step, NC(D)HW turned (depth, channel) in one XLA copy with the channels
padded to a sublane divisor, (h, w) flattened on lanes, so a tap (kh, kw) is a lane shift of kh * W + kw.
A block of `block_depths` output depths is one dot: its window of input depths, every tap shifted and
stacked into K (taps x window x channels), against a band ([block_depths * O, K]: row (z, o) reads window
depths z .. z + KD - 1). One dot over every depth would be a band D / KD times the conv's MXU work. The
dot's f32 result is summed as y and y^2 (f32: a variance is S2 - S1^2 / P) on the VPU, masked where a
position is past W' in its row (25k, llo: one band over every depth with the sums on the MXU, v6e 305.5
us, v5e 819; 4 depths a dot with the sums on the VPU, 174.2 and 276). A
2-D conv is D = 1. `build` refuses what does not fit VMEM and op_dispatch weighs it against the other
conv plans by their own cost models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, program_at
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.conv_norm import _lanes, _mxu, _with_conv_shape
from maxkernel.clients.offline.templates.conv_rows import params_refusal
from maxkernel.clients.offline.templates.op_families import CONV, check_config
from maxkernel.clients.offline.templates.row_blocks import itemsize
from maxkernel.tpu_tools.problem.emit import Program, body_lines, operand
from maxkernel.tpu_tools.problem.safe_ast import literal_eval

LINEAR = {"add", "sub", "mul", "div", "neg", "convert_element_type", "square", "integer_pow", "reshape"}
_MAX_VMEM = 40 * MiB
_CLOCK_MXU = 918e12  # v6e bf16 MXU flop/s (conv_stats' unit: the cost models are compared)
_HBM = 1.6e12
_VREGS_PER_US = 4e3  # f32 vregs shifted or summed per us: ~2 VPU ops each at ~4 ops a bundle, ~1.75 GHz (a rough v6e rate)


def plan(program: Program) -> dict[str, Any] | str:
    """Which equations act on the conv output y (as forms of degree <= 2) and which on statistics; else
    why not. Returns {"conv": index, "degree": {name: degree of each y-form}, "spatial": k, "flat": names of
    statistics broadcast over the positions}."""
    eqns = program["equations"]
    convs = [i for i, e in enumerate(eqns) if e["primitive"] in CONV]
    if len(convs) != 1 or len(program["outputs"]) != 1:
        return "not one convolution with one output"
    c = convs[0]
    conv = eqns[c]
    if c:
        return "equations before the convolution"
    if [operand(a) for a in conv["inputs"]] != program["input_names"][:2]:
        return "not a convolution of the program's first two inputs"
    out_shape = list(conv["out_specs"][0]["shape"])
    k = len(out_shape) - 2
    if k not in (2, 3):
        return f"a {k}-D convolution"
    spatial = out_shape[2:]
    deg: dict[str, int] = {conv["outputs"][0]: 1}
    shapes: dict[str, list[int]] = {}
    for name, spec in zip(program["input_names"], program["inputs"], strict=False):
        shapes[name] = list(spec["shape"])
    for e in eqns:
        for o_, s in zip(e["outputs"], e["out_specs"], strict=False):
            shapes[o_] = list(s["shape"])
    flat = set()  # statistics broadcast over the positions: kept at size 1 there
    for e in eqns[c + 1 :]:
        ins = [a for a in e["inputs"] if not a.startswith("lit:")]
        forms = [a for a in ins if a in deg]
        shp = list(e["out_specs"][0]["shape"]) if e["out_specs"] else []
        big = len(shp) >= k + 1 and shp[-k:] == spatial
        if not forms:
            if big and e["primitive"] != "broadcast_in_dim":
                return f"{e['primitive']} makes a value of the convolution's size from statistics"
            if big:  # a statistic broadcast over the positions: kept at size 1 there
                src = shapes.get(ins[0]) if ins else []
                dims = literal_eval(e["params"]["broadcast_dimensions"])
                if any(d >= len(shp) - k and (src or [1])[j] != 1 for j, d in enumerate(dims)):
                    return "a value broadcast over the positions varies along them"
                flat.add(e["outputs"][0])
            continue
        for a in ins:  # what a form meets must be one number per leading index, not per position
            if a not in deg and a not in flat and any(v != 1 for v in shapes.get(a, [])[-k:]):
                return f"{e['primitive']} meets {a} {shapes.get(a)}, which varies over the convolution's positions"
        p = e["primitive"]
        if p == "reduce_sum":
            axes = literal_eval(e["params"]["axes"])
            rank = len(shapes[forms[0]])
            if not set(range(rank - k, rank)) <= set(axes):
                return f"a sum over axes {axes} keeps some of the convolution's positions"
            continue
        if p not in LINEAR or not big:
            return f"{p} on the convolution's output (not a sum, nor of degree <= 2 in it)"
        if p == "reshape" and shp[-k:] != shapes[forms[0]][-k:]:
            return "a reshape that moves the convolution's positions"
        if p == "convert_element_type" and "float" not in e["out_specs"][0]["dtype"]:
            return "a convert of the convolution's output to a non-float type"
        if p == "integer_pow" and e["params"].get("y") != "2":
            return f"a power {e['params'].get('y')} of the convolution's output"
        if p == "div" and ins and ins[-1] in deg:
            return "a division by a value made from the convolution's output"
        d = [deg[a] for a in forms]
        if p == "mul" and len(forms) == 2:
            got = sum(d)
        elif p in ("square", "integer_pow"):
            got = 2 * d[0]
        else:
            got = max(d)
        if got > 2:
            return "a value of degree > 2 in the convolution's output"
        deg[e["outputs"][0]] = got
    if program["outputs"][0] in deg:
        return "its output is the convolution's size (nothing sums it)"
    if not any(e["primitive"] == "reduce_sum" and any(a in deg for a in e["inputs"]) for e in eqns):
        return "no sum over the convolution's output"
    return {"conv": c, "degree": deg, "spatial": k, "flat": flat}


def _form_line(e: Mapping[str, Any], sym: Symbolic, k: int) -> str:
    """One equation on y-forms, as a call of the module's `_P` helpers."""
    p = e["primitive"]
    args = [sym.literal(e, j) if a.startswith("lit:") else operand(a) for j, a in enumerate(e["inputs"])]
    out = operand(e["outputs"][0])
    if p == "reduce_sum":
        dt = e["out_specs"][0]["dtype"]
        return f"{out} = _p_sum({args[0]}, {e['params']['axes']}, jnp.{dt})"
    if p == "reshape":
        return f"{out} = _p_reshape({args[0]}, {sym.param(e, 'new_sizes')}, {k})"
    if p == "convert_element_type":
        return f"{out} = {args[0]}  # dtype roundings of y-forms are not kept"
    if p == "neg":
        return f"{out} = _p_scale({args[0]}, -1.0)"
    if p in ("square", "integer_pow"):
        return f"{out} = _p_mul({args[0]}, {args[0]})"
    if p == "add":
        return f"{out} = _p_add({args[0]}, {args[1]}, 1.0)"
    if p == "sub":
        return f"{out} = _p_add({args[0]}, {args[1]}, -1.0)"
    if p == "mul":
        return f"{out} = _p_mul({args[0]}, {args[1]})"
    if p == "div":
        return f"{out} = _p_div({args[0]}, {args[1]})"
    raise ValueError(f"{p} on a y-form")  # plan refused it already


def _stat_line(e: Mapping[str, Any], sym: Symbolic, k: int, flat: bool) -> list[str]:
    """A statistics equation as traced; a broadcast over the conv's positions (`flat`) kept at size 1 there."""
    if not flat:
        return body_lines({"equations": [e]}, sym=sym, mosaic=False)
    out = operand(e["outputs"][0])
    lead = f"{sym.param(e, 'shape')}[:-{k}] + (1,) * {k}"
    dims = sym.param(e, "broadcast_dimensions")
    return [f"{out} = lax.broadcast_in_dim({operand(e['inputs'][0])}, tuple({lead}), {dims})"]


SOURCE = (
    '''"""Convolution moments (offline template `conv_moments`), written from the reference's traced program.

${about}

Shape-generic: every shape is read from the inputs when traced; the block size was chosen for the
target size (${target}).
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_N = ${block_n}  # images per grid step
BLOCK_DEPTHS = ${block_depths}  # output depths one dot computes (its band's rows: BLOCK_DEPTHS x O)
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
'''
    + r'''

def _moments_kernel(x_ref, w_ref, m_ref, s1_ref, s2_ref, y_ref, *, offs, lp, hwp, d_out, o, cp, kd):
    # x_ref [nb, Dp * cp, H * W]: rows (depth, channel padded to cp), positions (h, w) on lanes;
    # w_ref [ZB * O, taps * (ZB + kd - 1) * cp]: one block's band; m_ref [1, lp]: 1 at valid positions
    w = w_ref[...]
    win = (BLOCK_DEPTHS + kd - 1) * cp
    for i in range(x_ref.shape[0]):
        xv = x_ref[i].astype(jnp.float32)  # sublane slices and lane shifts on 32-bit rows
        xv = jnp.concatenate([xv, jnp.zeros((xv.shape[0], hwp - xv.shape[1]), xv.dtype)], axis=1)
        acc1 = jnp.zeros((o, 128), jnp.float32)
        acc2 = jnp.zeros((o, 128), jnp.float32)
        for b in range(-(-d_out // BLOCK_DEPTHS)):
            xb = xv[b * BLOCK_DEPTHS * cp : b * BLOCK_DEPTHS * cp + win]  # the block's input depths
            taps = jnp.concatenate([xb[:, off : off + lp] for off in offs], axis=0).astype(x_ref.dtype)
            y_ref[...] = jnp.dot(w, taps, preferred_element_type=jnp.float32)  # [ZB * O, lp]: rows (z, o)
            for t in range(lp // 128):
                m = m_ref[:, pl.ds(t * 128, 128)]
                for z in range(min(BLOCK_DEPTHS, d_out - b * BLOCK_DEPTHS)):
                    c = y_ref[pl.ds(z * o, o), pl.ds(t * 128, 128)]
                    cm = c * m
                    acc1 = acc1 + cm
                    acc2 = acc2 + cm * c
        s1_ref[i] = acc1
        s2_ref[i] = acc2


def conv_moments(x, w):
    """Per (image, output channel): the sums of y and y^2 over the output positions, y = conv(x, w)
    (stride 1, no padding) accumulated in f32; and the positions' count."""
    if x.ndim == 4:  # a 2-D convolution: one depth
        x, w = x[:, :, None], w[:, :, None]
    n, c, d, h, wd = x.shape
    o, _, kd, kh, kw = w.shape
    d_out, ho, wo = d - kd + 1, h - kh + 1, wd - kw + 1
    cp = 1 << (c - 1).bit_length() if c <= 8 else -(-c // 8) * 8  # rows a depth takes: its channels, padded
    if c < 8 and (BLOCK_DEPTHS * cp % 8 or (BLOCK_DEPTHS + kd - 1) * cp % 8):
        cp = 8  # a block's first row and its window on 8-row tiles
    lp = pl.cdiv(ho * wd, 128) * 128  # output positions over the whole input width, lane-padded
    offs = [a * wd + b for a in range(kh) for b in range(kw)]
    hwp = pl.cdiv(max(offs) + lp, 128) * 128
    nblk = pl.cdiv(d_out, BLOCK_DEPTHS)
    dp = nblk * BLOCK_DEPTHS + kd - 1  # input depths the blocks read (zeros past D)
    xf = x.transpose(0, 2, 1, 3, 4).reshape(n, d, c, h * wd)
    xf = jnp.pad(xf, ((0, 0), (0, dp - d), (0, cp - c), (0, 0))).reshape(n, dp * cp, h * wd)
    # one block's band: row (z, o), column (tap, window depth j, channel) = w[o, c, j - z, kh, kw] for 0 <= j - z < kd
    win_d = BLOCK_DEPTHS + kd - 1
    wt = jnp.pad(w.transpose(0, 3, 4, 2, 1).reshape(o, kh * kw, kd, c), ((0, 0), (0, 0), (0, 0), (0, cp - c)))
    jj = jnp.arange(win_d)[None, :] - jnp.arange(BLOCK_DEPTHS)[:, None]  # [ZB, win_d]
    band = jnp.where(((jj >= 0) & (jj < kd))[None, None, :, :, None], wt[:, :, jnp.clip(jj, 0, kd - 1), :], 0)
    band = band.transpose(2, 0, 1, 3, 4).reshape(BLOCK_DEPTHS * o, kh * kw * win_d * cp).astype(x.dtype)
    pos = jnp.arange(lp)
    mask = ((pos < ho * wd) & (pos % wd < wo)).astype(jnp.float32)[None]
    nb = min(BLOCK_N, n)
    k_dim = kh * kw * win_d * cp
    s1, s2 = pl.pallas_call(
        functools.partial(_moments_kernel, offs=offs, lp=lp, hwp=hwp, d_out=d_out, o=o, cp=cp, kd=kd),
        out_shape=[jax.ShapeDtypeStruct((n, o, 128), jnp.float32)] * 2,
        grid=(pl.cdiv(n, nb),),
        in_specs=[
            pl.BlockSpec((nb, dp * cp, h * wd), lambda b: (b, 0, 0)),
            pl.BlockSpec((BLOCK_DEPTHS * o, k_dim), lambda b: (0, 0)),
            pl.BlockSpec((1, lp), lambda b: (0, 0)),
        ],
        out_specs=[pl.BlockSpec((nb, o, 128), lambda b: (b, 0, 0))] * 2,
        scratch_shapes=[pltpu.VMEM((BLOCK_DEPTHS * o, lp), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=VMEM_LIMIT_BYTES),
        cost_estimate=pl.CostEstimate(
            flops=int(2 * n * nblk * BLOCK_DEPTHS * o * k_dim * lp + 4 * n * d_out * o * lp),  # the band, the sums
            transcendentals=0,
            bytes_accessed=int(xf.size * xf.dtype.itemsize + 2 * n * o * 128 * 4),
        ),
        interpret=False,
        name="conv_offline_moments",
    )(xf, band, mask)
    return s1.sum(-1), s2.sum(-1), d_out * ho * wo


class _P(NamedTuple):
    """A value of the conv output's size, c0 + c1 y + c2 y^2 per leading index (coefficients [lead..., 1 x k],
    f32); m1, m2: the sums of y and y^2 over the k position axes, the same shape; count: the positions."""

    c0: Any
    c1: Any
    c2: Any
    m1: Any
    m2: Any
    count: int


def _f32(a):
    return jnp.asarray(a).astype(jnp.float32)


def _p_add(a, b, sign):
    if isinstance(a, _P) and isinstance(b, _P):
        return a._replace(c0=a.c0 + sign * b.c0, c1=a.c1 + sign * b.c1, c2=a.c2 + sign * b.c2)
    if isinstance(a, _P):
        return a._replace(c0=a.c0 + sign * _f32(b))
    return b._replace(c0=_f32(a) + sign * b.c0, c1=sign * b.c1, c2=sign * b.c2)


def _p_scale(a, s):
    return a._replace(c0=a.c0 * s, c1=a.c1 * s, c2=a.c2 * s)


def _p_mul(a, b):
    if isinstance(a, _P) and isinstance(b, _P):  # plan proved the degree stays <= 2
        return a._replace(c0=a.c0 * b.c0, c1=a.c0 * b.c1 + a.c1 * b.c0, c2=a.c0 * b.c2 + a.c1 * b.c1 + a.c2 * b.c0)
    return _p_scale(a, _f32(b)) if isinstance(a, _P) else _p_scale(b, _f32(a))


def _p_div(a, b):
    if isinstance(a, _P):
        b = _f32(b)
        return a._replace(c0=a.c0 / b, c1=a.c1 / b, c2=a.c2 / b)
    raise ValueError("a division by a value made from the convolution's output")


def _p_reshape(a, shape, k):
    lead = tuple(shape[:-k]) + (1,) * k
    full = a.m1.shape

    def r(v):
        return jnp.broadcast_to(v, full).reshape(lead)

    return _P(r(a.c0), r(a.c1), r(a.c2), r(a.m1), r(a.m2), a.count)


def _p_sum(a, axes, dtype):
    total = a.c0 * a.count + a.c1 * a.m1 + a.c2 * a.m2
    return jnp.sum(jnp.broadcast_to(total, jnp.broadcast_shapes(total.shape, a.m1.shape)), axis=axes).astype(dtype)


def workload(${args}):
    """The reference's signature: the conv's moments in the kernel, then the program on [N, O] sums."""
    s1, s2, count = conv_moments(${x}, ${w})
    n, o = s1.shape
    k = ${x}.ndim - 2
    one = (n, o) + (1,) * k
    ${conv_out} = _P(jnp.zeros((1, 1) + (1,) * k, jnp.float32), jnp.ones((1, 1) + (1,) * k, jnp.float32),
        jnp.zeros((1, 1) + (1,) * k, jnp.float32), s1.reshape(one), s2.reshape(one), count)
    sh = (${shapes})  # every input's shape, then the conv output's: the program's numbers read these
${program}
    return ${result}
'''
)


def build(program: Program) -> tuple[Template, str, dict[str, int]]:
    """(the template, its target size, its dims) of a conv whose output is only summed through ops of
    degree <= 2 in it; ValueError with the reason otherwise."""
    found = plan(program)
    if isinstance(found, str):
        raise ValueError(found)
    c, deg, k, flat = found["conv"], found["degree"], found["spatial"], found["flat"]
    eqns = program["equations"]
    conv = eqns[c]
    why = params_refusal(conv["params"], k)
    if why:
        raise ValueError(why)
    if conv["out_specs"][0]["dtype"] != program["inputs"][0]["dtype"]:
        raise ValueError("a convolution whose output dtype is not its input's")
    isz = itemsize(program["inputs"][0]["dtype"])
    if isz not in (2, 4):
        raise ValueError(f"{program['inputs'][0]['dtype']} inputs")
    sym = Symbolic(_with_conv_shape(program, c))
    if sym.mismatch:
        raise ValueError("its traced program changes structure with size")
    lines: list[str] = []
    for e in eqns[c + 1 :]:
        if any(a in deg for a in e["inputs"]):
            lines.append(_form_line(e, sym, k))
        else:
            lines += _stat_line(e, sym, k, e["outputs"][0] in flat)
    if sym.unsolved:
        raise ValueError(f"its program has sizes not read from its inputs ({sym.unsolved[0]})")
    at = program_at(program, sym.target)
    xs, ws = at["inputs"][0]["shape"], at["inputs"][1]["shape"]
    if k == 2:
        xs, ws = [xs[0], xs[1], 1, *xs[2:]], [ws[0], ws[1], 1, *ws[2:]]
    n, ch, d, h, wd = xs
    o, _, kd, kh, kw = ws
    d_out, ho, wo = d - kd + 1, h - kh + 1, wd - kw + 1
    lp = -(-(ho * wd) // 128) * 128
    hwp = -(-((kh - 1) * wd + kw - 1 + lp) // 128) * 128

    def geo(zb: int) -> tuple[int, int, int, int]:
        """(cp, k_dim, blocks, dp) as the kernel computes them for `zb` output depths a dot."""
        cp = 1 << (ch - 1).bit_length() if ch <= 8 else -(-ch // 8) * 8
        if ch < 8 and (zb * cp % 8 or (zb + kd - 1) * cp % 8):
            cp = 8
        blocks = -(-d_out // zb)
        return cp, kh * kw * (zb + kd - 1) * cp, blocks, blocks * zb + kd - 1

    def vmem(cfg: Mapping[str, Any], dims: Mapping[str, int]) -> int:
        nb, zb = min(int(cfg["block_n"]), n), int(cfg["block_depths"])
        cp, k_dim, _, dp = geo(zb)
        total = 2 * nb * dp * cp * _lanes(h * wd) * isz  # the input block, double-buffered
        total += 2 * zb * o * _lanes(k_dim) * isz + 2 * 8 * lp * 4  # the band, the mask
        total += dp * cp * hwp * 4 + k_dim * lp * (4 + isz)  # the rows in f32, the taps (f32, then cast)
        total += 2 * zb * o * lp * 4 + 4 * nb * o * 128 * 4  # the dot's result and its scratch, the sums
        return int(total)

    def cost(cfg: Mapping[str, Any], dims: Mapping[str, int]) -> float:
        """The MXU's 256-wide passes over the blocks' banded dots, beside the input's HBM read and the
        vector work (the lane shifts of each block's taps, the masked sums of y and y^2)."""
        nb, zb = min(int(cfg["block_n"]), n), int(cfg["block_depths"])
        cp, k_dim, blocks, dp = geo(zb)
        mxu = 2 * n * blocks * zb * o * _mxu(k_dim) * _mxu(lp) / _CLOCK_MXU * 1e6 * 1.3
        hbm = n * dp * cp * h * wd * isz / _HBM * 1e6
        vregs = n * (blocks * k_dim * lp + 4 * d_out * o * lp) / 1024  # f32 vregs shifted or summed
        vpu = vregs / _VREGS_PER_US
        return max(mxu, hbm, vpu) + 0.35 * -(-n // nb) + (1e6 if vmem(cfg, dims) > _MAX_VMEM else 0.0)

    legal_n = [b for b in (1, 2, 4) if b <= n]
    legal_zb = sorted({min(z, d_out) for z in (1, 2, 4, 8)})
    configs = [{"block_n": b, "block_depths": z} for b in legal_n for z in legal_zb]
    fitting = [cfg for cfg in configs if vmem(cfg, {}) <= _MAX_VMEM]
    if not fitting:
        raise ValueError(
            f"one image a step needs {min(vmem(cfg, {}) for cfg in configs) / MiB:.0f} MiB of VMEM "
            f"(> {_MAX_VMEM // MiB} MiB: a block of output rows is not written)"
        )
    initial = min(fitting, key=lambda cfg: (cost(cfg, {}), cfg["block_n"], -cfg["block_depths"]))
    names = program["input_names"]
    fixed = {
        "about": f"Convolution over a {at['inputs'][0]['dtype']} {at['inputs'][0]['shape']} input, stride 1, "
        f"no padding, its output only summed: the kernel takes each (image, channel)'s sums of y and y^2 over "
        f"its {d_out * ho * wo} positions and the program's {len(eqns) - c - 1} equations after the conv run "
        "on them (y-forms c0 + c1 y + c2 y^2, `_P`).",
        "target": sym.target,
        "args": ", ".join(names),
        "x": names[0],
        "w": names[1],
        "conv_out": operand(conv["outputs"][0]),
        "shapes": "".join(f"{a}.shape, " for a in names) + f"{names[0]}.shape[:1] + (s1.shape[1],) + tuple("
        f"a - b + 1 for a, b in zip({names[0]}.shape[2:], {names[1]}.shape[2:], strict=True)),",
        "program": "\n".join(" " * 4 + ln for ln in lines),
        "result": operand(program["outputs"][0]),
    }
    dims = {"N": n, "C": ch, "C_out": o, "D": d, "H": h, "W": wd}
    template = Template(
        name="conv_moments",
        operators=("program",),
        source=SOURCE,
        tunables={"block_n": tuple(legal_n), "block_depths": tuple(legal_zb)},
        dims_of=lambda sizes: dims,
        problems=check_config({"block_n": legal_n, "block_depths": legal_zb}),
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: dict(fixed),
        constraints=(
            f"block_n in {legal_n} (images per step)",
            f"block_depths in {legal_zb} (output depths one dot computes: its band's rows)",
        ),
        grid_axes=lambda cfg: ["images"],
        semantics=lambda cfg: ["parallel"],
    )
    return template, sym.target, dims
