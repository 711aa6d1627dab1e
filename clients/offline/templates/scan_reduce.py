"""Scans (cumsum, cumprod, cummax, cummin; reverse too) and arg-reductions (argmax/argmin, with the
max/min beside them) along one axis, as Pallas kernels that walk that axis block by block.

Layout: the input is viewed as [pre, L] when the axis is the last one (L on lanes) or [pre, L, post]
otherwise (L on sublanes, post on lanes); both views are reshapes, no data moves. The grid's last axis
walks L in order ("arbitrary") and carries a running value in VMEM scratch: a scan's total so far, an
arg-reduction's best value and its index. Inside a block a scan is a log-step (Hillis-Steele) scan of
rolled copies (`pltpu.roll`, masked at the edge), all in f32; an arg-reduction takes the block's
max/min and the first index that holds it, and keeps an earlier block's index on ties (first
occurrence, as `jnp.argmax`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.op_families import ARG, Core, check_config, epilogue_source
from maxkernel.clients.offline.templates.row_blocks import SUBLANES, itemsize, nbytes
from maxkernel.tpu_tools.problem.emit import operand
from maxkernel.tpu_tools.problem.safe_ast import literal_eval

HEADER = '''"""${title} (offline template `${name}`), written from the reference's traced program.

${about}

Shape-generic: every shape is read from the input when the kernel is traced; the block sizes were
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
BLOCK_ROWS = ${block_rows}  # the independent axis (rows of [pre, L], or post's lanes of [pre, L, post])
BLOCK_L = ${block_l}  # the walked axis
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
AXIS = ${axis}  # the reference's axis
LANES = ${lanes}  # True: L is the tile's lane axis ([pre, L]); False: its sublane axis ([pre, L, post])
TILE_AXIS = 1 if LANES else 0  # the walked axis of one [rows, L] or [L, post] tile
'''

SCAN_BODY = '''REVERSE = ${reverse}
IDENTITY = ${identity}  # the combine's identity: fills masked and shifted-in positions


def _combine(a, b):
    return ${combine}


def _scan_tile(y, pos, n):
    """Inclusive scan of the f32 tile `y` along TILE_AXIS (length n): log2(n) rolled, masked combines."""
    shift = 1
    while shift < n:
        if REVERSE:  # suffix scan: position p takes p + shift
            moved = pltpu.roll(y, n - shift, TILE_AXIS)
            y = _combine(y, jnp.where(pos < n - shift, moved, IDENTITY))
        else:  # prefix scan: position p takes p - shift
            moved = pltpu.roll(y, shift, TILE_AXIS)
            y = _combine(y, jnp.where(pos >= shift, moved, IDENTITY))
        shift *= 2
    return y


def _kernel(x_ref, ${out_refs}, carry_ref, *, length, block_l, n_blocks):
    j = pl.program_id(${walk_axis})  # step along L, in scan order

    @pl.when(j == 0)
    def _init():  # a new row block: nothing scanned yet
        carry_ref[...] = jnp.full(carry_ref.shape, IDENTITY, jnp.float32)

    blk = n_blocks - 1 - j if REVERSE else j  # the block of L this step reads
    x = x_ref[...]  # [rows, block_l] or [block_l, lanes]
    y = x.astype(jnp.float32)
    pos = lax.broadcasted_iota(jnp.int32, y.shape, TILE_AXIS)
    if length % block_l:  # the last block runs past L: its tail must not enter the scan
        y = jnp.where(blk * block_l + pos < length, y, IDENTITY)
    y = _combine(_scan_tile(y, pos, block_l), carry_ref[...])  # f32, the scan so far
    edge = slice(0, 1) if REVERSE else slice(block_l - 1, block_l)  # the last position in scan order
    carry_ref[...] = y[:, edge] if LANES else y[edge, :]
${epilogue}
${stores}


def workload(x):
    shape = x.shape
    pre, length, post = math.prod(shape[:AXIS]), shape[AXIS], math.prod(shape[AXIS + 1 :])
    block_l = min(BLOCK_L, length)
    n_blocks = pl.cdiv(length, block_l)
    if LANES:
        xv = x.reshape(pre, length)  # [pre, L]: free
        rows = min(BLOCK_ROWS, pre)
        grid = (pl.cdiv(pre, rows), n_blocks)
        block = (rows, block_l)
        carry = (rows, 1)
        semantics = ("parallel", "arbitrary")

        def x_map(i, j):  # [pre, L]: row block i, the j-th block of L in scan order
            return i, (n_blocks - 1 - j if REVERSE else j)
    else:
        xv = x.reshape(pre, length, post)  # [pre, L, post]: free
        rows = min(BLOCK_ROWS, post)
        grid = (pre, pl.cdiv(post, rows), n_blocks)
        block = (None, block_l, rows)
        carry = (1, rows)
        semantics = ("parallel", "parallel", "arbitrary")

        def x_map(b, i, j):  # [pre, L, post]: batch b, lane block i, the j-th block of L in scan order
            return b, (n_blocks - 1 - j if REVERSE else j), i

    spec = pl.BlockSpec(block, x_map)
    cost = pl.CostEstimate(
        flops=int(${flops_per_elem} * xv.size * max(1, math.ceil(math.log2(block_l)))),
        transcendentals=0,
        bytes_accessed=int(xv.size * xv.dtype.itemsize + ${out_bytes_per_elem} * xv.size),
    )
    outs = pl.pallas_call(
        functools.partial(_kernel, length=length, block_l=block_l, n_blocks=n_blocks),
        out_shape=[${out_shapes}],
        grid=grid,
        in_specs=[spec],
        out_specs=[${out_specs}],
        scratch_shapes=[pltpu.VMEM(carry, jnp.float32)],  # the running total of each row (or lane)
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=VMEM_LIMIT_BYTES),
        cost_estimate=cost,
        interpret=False,
        name="offline_scan_${steps_name}",
    )(xv)
    return ${result}
'''

ARG_BODY = """IS_MAX = ${is_max}  # argmax (True) or argmin
IDENTITY = ${identity}  # fills masked positions: never the best
INDEX_DTYPE = ${index_dtype}


def _kernel(x_ref, ${out_refs}, best_ref, idx_ref, *, length, block_l, n_blocks):
    j = pl.program_id(${walk_axis})  # step along L

    @pl.when(j == 0)
    def _init():  # a new row block: no value seen yet
        best_ref[...] = jnp.full(best_ref.shape, IDENTITY, jnp.float32)
        idx_ref[...] = jnp.zeros(idx_ref.shape, jnp.int32)

    x = x_ref[...]  # [rows, block_l] or [block_l, lanes]
    y = x.astype(jnp.float32)
    pos = lax.broadcasted_iota(jnp.int32, y.shape, TILE_AXIS)
    if length % block_l:  # the last block runs past L: its tail is never the best
        y = jnp.where(j * block_l + pos < length, y, IDENTITY)
    # a NaN is the best value, as in jnp.argmax/argmin: its first index wins
    nan = y != y
    first_nan = jnp.min(jnp.where(nan, pos, block_l), axis=TILE_AXIS, keepdims=True)
    clean = jnp.where(nan, IDENTITY, y)
    m = jnp.max(clean, axis=TILE_AXIS, keepdims=True) if IS_MAX else jnp.min(clean, axis=TILE_AXIS, keepdims=True)
    first_val = jnp.min(jnp.where(clean == m, pos, block_l), axis=TILE_AXIS, keepdims=True)
    has_nan = first_nan < block_l
    first = jnp.where(has_nan, first_nan, first_val) + j * block_l
    m = jnp.where(has_nan, jnp.nan, m)
    best = best_ref[...]
    seen_nan = best != best
    # strict: an earlier block wins ties, and nothing beats an earlier NaN
    better = ((m > best if IS_MAX else m < best) | (has_nan & ~seen_nan)) & ~seen_nan
    idx_ref[...] = jnp.where(better, first, idx_ref[...])
    best_ref[...] = jnp.where(better, m, best_ref[...])

    @pl.when(j == n_blocks - 1)
    def _store():  # L is done: the best value and its first index
        best = best_ref[...]
        idx = idx_ref[...].astype(INDEX_DTYPE)
${epilogue}
${stores}


def workload(x):
    shape = x.shape
    pre, length, post = math.prod(shape[:AXIS]), shape[AXIS], math.prod(shape[AXIS + 1 :])
    out_shape = shape[:AXIS] + shape[AXIS + 1 :]
    block_l = min(BLOCK_L, length)
    n_blocks = pl.cdiv(length, block_l)
    if LANES:
        xv = x.reshape(pre, length)  # [pre, L]: free
        rows = min(BLOCK_ROWS, pre)
        grid = (pl.cdiv(pre, rows), n_blocks)
        view, block, out_block, keep = (pre, 1), (rows, block_l), (rows, 1), (rows, 1)
        semantics = ("parallel", "arbitrary")

        def x_map(i, j):  # [pre, L]: row block i, L block j
            return i, j

        def o_map(i, j):  # [pre, 1]: row block i, written at the last L block
            return i, 0
    else:
        xv = x.reshape(pre, length, post)  # [pre, L, post]: free
        rows = min(BLOCK_ROWS, post)
        grid = (pre, pl.cdiv(post, rows), n_blocks)
        view, block, out_block, keep = (pre, 1, post), (None, block_l, rows), (None, 1, rows), (1, rows)
        semantics = ("parallel", "parallel", "arbitrary")

        def x_map(b, i, j):  # [pre, L, post]: batch b, L block j, lane block i
            return b, j, i

        def o_map(b, i, j):  # [pre, 1, post]: batch b, lane block i
            return b, 0, i

    cost = pl.CostEstimate(
        flops=int(4 * xv.size), transcendentals=0, bytes_accessed=int(xv.size * xv.dtype.itemsize + 8 * pre * post)
    )
    outs = pl.pallas_call(
        functools.partial(_kernel, length=length, block_l=block_l, n_blocks=n_blocks),
        out_shape=[${out_shapes}],
        grid=grid,
        in_specs=[pl.BlockSpec(block, x_map)],
        out_specs=[${out_specs}],
        scratch_shapes=[pltpu.VMEM(keep, jnp.float32), pltpu.VMEM(keep, jnp.int32)],  # best value, its index
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=VMEM_LIMIT_BYTES),
        cost_estimate=cost,
        interpret=False,
        name="offline_${steps_name}",
    )(xv)
    return ${result}
"""

SCAN_OPS = {  # primitive -> (combine, identity, flops per element per step)
    "cumsum": ("a + b", "0.0", 2),
    "cumprod": ("a * b", "1.0", 2),
    "cummax": ("jnp.maximum(a, b)", "-jnp.inf", 2),
    "cummin": ("jnp.minimum(a, b)", "jnp.inf", 2),
}
_INITIAL_VMEM = 16 * MiB
_MAX_VMEM = 40 * MiB


def _legal(n: int, align: int, top: int) -> list[int]:
    """Block sizes along a dim of n: multiples of `align` (powers of two times it) below n, and n itself."""
    out, b = [], align
    while b < n and b <= top:
        out.append(b)
        b *= 2
    return [*out, n] if n <= top or not out else out


def _jnp_dtype(dtype: str) -> str:
    return f"jnp.{dtype}"


def build(core: Core) -> tuple[Template, str, dict[str, int]]:
    """(the template, its target size, its dims) of a scan or arg-reduction program."""
    at = core.program
    op = next(e for e in core.cores if core.family == "scan" or e["primitive"] in ARG)
    src = operand(op["inputs"][0])
    spec = at["inputs"][at["input_names"].index(src)]
    shape, dtype = list(spec["shape"]), spec["dtype"]
    rank = len(shape)
    if core.family == "scan":
        axis = int(op["params"]["axis"])
    else:
        axes = literal_eval(op["params"]["axes"])
        axis = int(axes[0] if isinstance(axes, (list, tuple)) else axes)
    axis %= rank
    lanes = axis == rank - 1
    pre, length, post = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    size_in = itemsize(dtype)
    out_specs = at["out_specs"]
    outs = [operand(o) for o in at["outputs"]]
    sub = max(SUBLANES.get(size_in, 8), *(SUBLANES.get(itemsize(s["dtype"]), 8) for s in out_specs))
    if lanes:
        legal_rows = _legal(pre, sub, 1024)
        legal_l = _legal(length, 128, 8192)
    else:
        legal_rows = _legal(post, 128, 4096)
        legal_l = _legal(length, sub, 4096)
    if not legal_rows or not legal_l:
        raise ValueError(f"no legal block tiles a {shape} input along axis {axis}")
    tile = "[rows, block_l]" if lanes else "[block_l, lanes]"
    out_names = ", ".join(f"o{i}_ref" for i in range(len(outs)))
    if core.family == "scan":
        prim = op["primitive"]
        combine, identity, flops = SCAN_OPS[prim]
        reverse = op["params"]["reverse"] == "True"
        names = {operand(op["outputs"][0]): f"y.astype({_jnp_dtype(op['out_specs'][0]['dtype'])})", src: "x"}
        lines, results = epilogue_source(core, names)
        stores = "\n".join(
            f"    o{i}_ref[...] = {r}.astype(o{i}_ref.dtype)  # {tile}" for i, r in enumerate(results)
        )
        view = "(pre, length) if LANES else (pre, length, post)"
        out_shapes = ", ".join(f"jax.ShapeDtypeStruct({view}, {_jnp_dtype(s['dtype'])})" for s in out_specs)
        fixed = {
            "reverse": str(reverse),
            "identity": identity,
            "combine": combine,
            "flops_per_elem": str(flops),
            "out_bytes_per_elem": str(sum(itemsize(s["dtype"]) for s in out_specs)),
            "out_specs": ", ".join("spec" for _ in outs),
            "result": ", ".join(f"outs[{i}].reshape(shape)" for i in range(len(outs)))
            + ("," if len(outs) == 1 else ""),
            "steps_name": prim,
            "title": f"{'Reverse ' if reverse else ''}{prim} along axis {axis}",
            "about": f"A {prim} of a {dtype} {shape} array along axis {axis}{' from the end' if reverse else ''}, "
            "block by block along that axis with the running value in VMEM scratch.",
        }
        body = SCAN_BODY
        walk_bytes = 4 * 3  # f32 tile, its rolled copy, the mask
    else:
        arg = op
        is_max = arg["primitive"] == "argmax"
        names = {}
        for e in core.cores:
            out = operand(e["outputs"][0])
            dt = _jnp_dtype(e["out_specs"][0]["dtype"])
            names[out] = f"idx.astype({dt})" if e["primitive"] in ARG else f"best.astype({dt})"
        lines, results = epilogue_source(core, names, indent="        ")
        stores = "\n".join(
            f"        o{i}_ref[...] = {r}.astype(o{i}_ref.dtype)" for i, r in enumerate(results)
        )
        out_shapes = ", ".join(f"jax.ShapeDtypeStruct(view, {_jnp_dtype(s['dtype'])})" for s in out_specs)
        fixed = {
            "is_max": str(is_max),
            "identity": "-jnp.inf" if is_max else "jnp.inf",
            "index_dtype": arg["params"]["index_dtype"],
            "out_specs": ", ".join("pl.BlockSpec(out_block, o_map)" for _ in outs),
            "result": ", ".join(f"outs[{i}].reshape(out_shape)" for i in range(len(outs)))
            + ("," if len(outs) == 1 else ""),
            "steps_name": arg["primitive"],
            "title": f"{arg['primitive']} along axis {axis}"
            + (f" with its {'max' if is_max else 'min'}" if len(core.cores) > 1 else ""),
            "about": f"{arg['primitive']} of a {dtype} {shape} array along axis {axis}: each step reduces one "
            "block of that axis and keeps the best value and its first index in VMEM scratch.",
        }
        body = ARG_BODY
        walk_bytes = 4 * 3
    fixed |= {
        "axis": str(axis),
        "lanes": str(lanes),
        "walk_axis": "1" if lanes else "2",
        "out_refs": out_names,
        "epilogue": "\n".join(lines),
        "stores": stores,
        "out_shapes": out_shapes,
        "target": core.target,
    }
    if len(outs) == 1:
        fixed["result"] = fixed["result"].rstrip(",")
    rows_total = pre if lanes else pre * post
    hbm = nbytes(shape, dtype) + sum(nbytes(s["shape"], s["dtype"]) for s in out_specs)
    name = "scan" if core.family == "scan" else "arg_reduce"

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        r, b = min(int(c["block_rows"]), pre if lanes else post), min(int(c["block_l"]), length)
        outs_b = sum(itemsize(s["dtype"]) for s in out_specs) if core.family == "scan" else 0
        return int(2 * r * b * (size_in + outs_b) + r * b * walk_bytes)

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        r, b = min(int(c["block_rows"]), pre if lanes else post), min(int(c["block_l"]), length)
        steps = -(-rows_total // r) * -(-length // b) if lanes else pre * -(-post // r) * -(-length // b)
        vpu = pre * length * post * (max(1, math.ceil(math.log2(b))) if core.family == "scan" else 1)
        penalty = 1e6 if vmem(c, d) > _MAX_VMEM else 0.0
        return hbm / 1.6e12 * 1e6 + 0.35 * steps + vpu * 3 / 1024 / 1e3 + penalty

    configs = [{"block_rows": r, "block_l": b} for r in legal_rows for b in legal_l]
    fitting = [c for c in configs if vmem(c, {}) <= _INITIAL_VMEM] or configs[:1]
    initial = min(fitting, key=lambda c: (cost(c, {}), -c["block_l"]))
    source = HEADER + body
    template = Template(
        name=name,
        operators=("program",),
        source=source,
        tunables={"block_rows": tuple(legal_rows), "block_l": tuple(legal_l)},
        dims_of=lambda sizes: {"pre": pre, "L": length, "post": post},
        problems=check_config({"block_rows": legal_rows, "block_l": legal_l}),
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: {**fixed, "name": name},
        constraints=(
            f"block_rows in {legal_rows} ({'rows on sublanes' if lanes else 'lanes'})",
            f"block_l in {legal_l} (the walked axis, {'lanes' if lanes else 'sublanes'})",
        ),
        grid_axes=lambda c: (["rows"] if lanes else ["batch", "lanes"]) + ["walk"],
        semantics=lambda c: ["parallel"] * (1 if lanes else 2) + ["arbitrary"],
    )
    return template, core.target, {"pre": pre, "L": length, "post": post}
