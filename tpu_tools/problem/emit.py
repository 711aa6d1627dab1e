"""Re-emit a traced reference program (tpu_tools/problem/program.py's description) as Python source.

Each equation becomes one `jax.lax` call with the reference's own parameters, so code built from it
computes what the reference computes, rounding step by rounding step: the offline model's kernel bodies
(`mosaic=True`: rewrites Mosaic needs; shapes along a tiled axis written as its block size and every
other number that follows the reference's size written from the input shapes, clients/offline/dims.py)
and an extracted model region's plain-JAX reference (`mosaic=False`: the equations as they were).
Primitives without a public `lax` form here are reported, never guessed.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from maxkernel.tpu_tools.problem import safe_ast
from maxkernel.tpu_tools.problem.dot_precision import is_wide, precision_passes

Program = Mapping[str, Any]  # ProgramDescription.model_dump(): inputs, equations, outputs, census, ...

UNARY = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log1p": "log1p", "expm1": "expm1", "tanh": "tanh",
    "logistic": "logistic", "sin": "sin", "cos": "cos", "tan": "tan", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "cbrt": "cbrt", "abs": "abs", "neg": "neg", "sign": "sign", "floor": "floor", "ceil": "ceil",
    "is_finite": "is_finite", "square": "square", "erf": "erf", "erfc": "erfc", "erf_inv": "erf_inv",
    "not": "bitwise_not", "atan": "atan", "asin": "asin", "acos": "acos", "sinh": "sinh", "cosh": "cosh",
    "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "imag": "imag", "real": "real",
}  # fmt: skip
BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "max": "max", "min": "min", "pow": "pow",
    "atan2": "atan2", "rem": "rem", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "nextafter": "nextafter",
    "shift_left": "shift_left", "shift_right_logical": "shift_right_logical",
    "shift_right_arithmetic": "shift_right_arithmetic",
}  # fmt: skip
REDUCE = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or"}
CUMULATIVE = {"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"}
ELEMENTWISE = set(UNARY) | set(BINARY) | {
    "integer_pow", "convert_element_type", "select_n", "clamp", "stop_gradient", "copy", "copy_p",
    "reduce_precision",
}  # fmt: skip
SHAPE_PARAMS = {"broadcast_in_dim": "shape", "reshape": "new_sizes", "iota": "shape"}
# 0-d equations Mosaic's scalar unit cannot legalize (math.powf on f32, libtpu compile-only v6e: an optimizer's
# 1 - b1**step): computed on a (1, 1) vector and read back as element [0, 0]. exp, log, sqrt, rsqrt, tanh,
# logistic, sin, cos, atan2, erf, erf_inv, rem, floor, round, div and the compares lower as scalars.
SCALAR_ON_VECTOR = {"pow"}


class Unsupported(ValueError):
    """The program uses a primitive this emitter has no source form for."""


def _tuple(text: str) -> tuple:
    value = safe_ast.literal_eval(text)
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _kw(params: Mapping[str, str], *names: str) -> str:
    """`, name=value` for the params that are set (not None)."""
    return "".join(f", {n}={params[n]}" for n in names if n in params and params[n] != "None")


def _call(prim: str, args: list[str], p: Mapping[str, str]) -> str:
    """The source expression of one equation (its operands already spelled as source)."""
    a = args
    if prim == "is_finite":  # exact in f32, and Mosaic's is_finite takes f32 only
        return f"lax.is_finite(lax.convert_element_type({a[0]}, jnp.float32))"
    if prim in UNARY:
        return f"lax.{UNARY[prim]}({a[0]}{_kw(p, 'accuracy')})"
    if prim == "reduce_window":
        return (
            f"lax.reduce_window({a[0]}, {a[1]}, {p['jaxpr']}, {p['window_dimensions']}, {p['window_strides']}, "
            f"{p['padding']}, {p['base_dilation']}, {p['window_dilation']})"
        )
    if prim in ("scatter", "scatter-add", "scatter_add"):
        fn = "scatter" if prim == "scatter" else "scatter_add"
        return (
            f"lax.{fn}({a[0]}, {a[1]}, {a[2]}, {p['dimension_numbers']}"
            f"{_kw(p, 'indices_are_sorted', 'unique_indices', 'mode')})"
        )
    if prim == "ragged_dot_general":
        return (
            f"lax.ragged_dot_general({a[0]}, {a[1]}, {a[2]}, {p['ragged_dot_dimension_numbers']}"
            f"{_kw(p, 'precision', 'preferred_element_type', 'group_offset')})"
        )
    if prim == "gather":
        return (
            f"lax.gather({a[0]}, {a[1]}, {p['dimension_numbers']}, {p['slice_sizes']}"
            f"{_kw(p, 'indices_are_sorted', 'unique_indices', 'mode', 'fill_value')})"
        )
    if prim in BINARY:
        return f"lax.{BINARY[prim]}({a[0]}, {a[1]})"
    if prim in ("stop_gradient", "copy", "copy_p", "optimization_barrier"):
        return a[0]
    if prim == "integer_pow":
        return f"lax.integer_pow({a[0]}, {p['y']})"
    if prim == "convert_element_type":
        return f"lax.convert_element_type({a[0]}, {p['new_dtype']})"
    if prim == "reduce_precision":
        return f"lax.reduce_precision({a[0]}, {p['exponent_bits']}, {p['mantissa_bits']})"
    if prim == "select_n":
        return f"lax.select_n({', '.join(a)})"
    if prim == "clamp":
        return f"lax.clamp({a[0]}, {a[1]}, {a[2]})"
    if prim == "broadcast_in_dim":
        return f"lax.broadcast_in_dim({a[0]}, {p['shape']}, {p['broadcast_dimensions']})"
    if prim == "reshape":
        return f"lax.reshape({a[0]}, {p['new_sizes']}{_kw(p, 'dimensions')})"
    if prim == "transpose":
        return f"lax.transpose({a[0]}, {p['permutation']})"
    if prim == "squeeze":
        return f"lax.squeeze({a[0]}, {p['dimensions']})"
    if prim == "expand_dims":
        return f"lax.expand_dims({a[0]}, {p['dimensions']})"
    if prim in REDUCE:
        return f"lax.{prim}({a[0]}, {p['axes']})"
    if prim in ("argmax", "argmin"):
        return f"lax.{prim}({a[0]}, {_tuple(p['axes'])[0]}, {p['index_dtype']})"
    if prim in CUMULATIVE:
        return f"lax.{prim}({a[0]}, {p['axis']}, {p['reverse']})"
    if prim == "iota":
        if "float" in p["dtype"]:  # Mosaic's iota is integer-only; small counts are exact in floats
            return f"lax.convert_element_type(lax.broadcasted_iota(jnp.int32, {p['shape']}, {p['dimension']}), {p['dtype']})"
        return f"lax.broadcasted_iota({p['dtype']}, {p['shape']}, {p['dimension']})"
    if prim == "dot_general":
        return f"lax.dot_general({a[0]}, {a[1]}, {p['dimension_numbers']}{_kw(p, 'precision', 'preferred_element_type')})"
    if prim == "slice":
        return f"lax.slice({a[0]}, {p['start_indices']}, {p['limit_indices']}{_kw(p, 'strides')})"
    if prim == "sort":  # one operand: an array; several (keys first): a tuple, one per output
        ops = a[0] if len(a) == 1 else f"({', '.join(a)},)"
        return f"lax.sort({ops}, dimension={p['dimension']}, is_stable={p['is_stable']}, num_keys={p['num_keys']})"
    if prim == "split":
        return f"lax.split({a[0]}, {p['sizes']}, {p['axis']})"
    if prim == "concatenate":
        return f"lax.concatenate([{', '.join(a)}], {p['dimension']})"
    if prim == "stack":  # jnp.stack binds its own primitive (a scanned layer stack's per-layer outputs too)
        return f"jnp.stack([{', '.join(a)}], axis={p['axis']})"
    if prim == "pad":
        return f"lax.pad({a[0]}, {a[1]}, {p['padding_config']})"
    if prim == "rev":
        return f"lax.rev({a[0]}, {p['dimensions']})"
    if prim == "top_k":
        return f"lax.top_k({a[0]}, {p['k']})"
    if prim == "conv_general_dilated":
        return (
            f"lax.conv_general_dilated({a[0]}, {a[1]}, {p['window_strides']}, {p['padding']}, "
            f"{p['lhs_dilation']}, {p['rhs_dilation']}, {p['dimension_numbers']}, "
            f"{p['feature_group_count']}, {p['batch_group_count']}{_kw(p, 'precision', 'preferred_element_type')})"
        )
    raise Unsupported(prim)


EMITTABLE = (
    ELEMENTWISE | REDUCE | CUMULATIVE | set(SHAPE_PARAMS)
    | {"transpose", "squeeze", "expand_dims", "argmax", "argmin", "dot_general", "slice", "concatenate",
       "pad", "rev", "split", "conv_general_dilated", "optimization_barrier", "top_k", "gather",
       "reduce_window", "ragged_dot_general"}
)  # fmt: skip


# Written only as plain JAX (an extracted region, a composed step): never offered to a Pallas body. jax's
# Pallas TPU lowering has no TensorCore rule for these ("Unimplemented primitive in Pallas TPU lowering
# for tc: scatter"; sort only for the SparseCore's vector subcore).
PLAIN_ONLY = {"sort", "stack", "scatter", "scatter-add"}


# Control flow: written only as plain JAX, each body a local function (lax.switch, lax.scan, lax.while_loop)
CONTROL = {"cond", "scan", "while"}


def _primitives(equations: Sequence[Mapping[str, Any]]) -> set[str]:
    """Every primitive of `equations`, their control-flow bodies' included."""
    out: set[str] = set()
    for e in equations:
        out.add(e["primitive"])
        for sub in e.get("subprograms") or ():
            out |= _primitives(sub["equations"])
    return out


def unsupported_ops(program: Program, *, mosaic: bool = True) -> list[str]:
    """Primitives of `program` this emitter cannot write (sorted, unique), its unrenderable params included."""
    known = EMITTABLE if mosaic else EMITTABLE | PLAIN_ONLY | CONTROL
    prims = set(program.get("census", {}))
    if not mosaic:
        prims |= _primitives(program.get("equations", ()))
    bad = {p for p in prims if p not in known}
    bad |= set(program.get("unrenderable", []))
    if program.get("error"):
        bad.add("untraceable")
    return sorted(bad)


def operand(name: str) -> str:
    return name[4:] if name.startswith("lit:") else name


# ---------------------------------------------------------------------------------------------------
# A dot inside a Mosaic kernel at the numerics XLA gives the reference's dot on a TPU (dot_precision.py)

_DOT_DOCS = {
    "narrow": "its operands as they are (no wider than bf16), one MXU pass, f32 accumulation",
    "bf16_1x": "an f32 dot at DEFAULT precision (BF16_BF16_F32): operands rounded to bf16, one MXU pass, f32 "
    "accumulation",
    "bf16_3x": "an f32 dot at HIGH precision (BF16_BF16_F32_X3): each operand split into a bf16 head and tail, "
    "three MXU passes (head x head, head x tail, tail x head), f32 accumulation",
    "f32": "an f32 dot at HIGHEST precision: Mosaic's full-precision f32 matmul",
    "f32_host": "its f32 operands as they are (the numerics are the host CPU's: f32 dots in f32)",
}
DOT_KINDS = tuple(_DOT_DOCS)


def var_dtypes(program: Program) -> dict[str, str]:
    """The dtype of every variable of a traced program: its inputs' and each equation's outputs'."""
    out = {
        n: s["dtype"] for n, s in zip(program.get("input_names", []), program.get("inputs", []), strict=False)
    }
    for e in program.get("equations", []):
        for name, spec in zip(e["outputs"], e.get("out_specs", []), strict=False):
            out[name] = spec["dtype"]
    return out


def dot_kind(program: Program, e: Mapping[str, Any], dtypes: Mapping[str, str] | None = None) -> str:
    """How a kernel computes the program's dot `e` at the numerics its target gives the reference's:
    `narrow` (operands no wider than bf16), else by its precision on a TPU (dot_precision.py: DEFAULT
    `bf16_1x`, HIGH `bf16_3x`, HIGHEST `f32`), or `f32_host` where the program's `numerics` is `cpu`.
    An operand of unknown dtype counts as the dot's output dtype."""
    dtypes = var_dtypes(program) if dtypes is None else dtypes
    out = e["out_specs"][0]["dtype"] if e.get("out_specs") else "float32"
    if not any(is_wide(dtypes.get(a, out)) for a in e["inputs"][:2] if not a.startswith("lit:")):
        return "narrow"
    if program.get("numerics") == "cpu":
        return "f32_host"
    passes = precision_passes(e.get("params", {}).get("precision"))
    return {1: "bf16_1x", 3: "bf16_3x"}.get(passes, "f32")


def mxu_dot_note(kind: str) -> str:
    """One line saying how a kernel's dot computes (a kernel docstring's words)."""
    return _DOT_DOCS[kind]


def dot_time_factor(kind: str) -> float:
    """A kernel dot's MXU time over one bf16 pass of the same flops (what mxu_dot_source writes costs): an f32
    pass is chips.F32_MXU_SLOWDOWN bf16 ones. For a template's rough cost, which only orders proposals."""
    from maxkernel.tpu_tools.hardware.chips import F32_MXU_SLOWDOWN

    return {"narrow": 1.0, "bf16_1x": 1.0, "bf16_3x": 3.0, "f32": 6 * F32_MXU_SLOWDOWN}.get(
        kind, F32_MXU_SLOWDOWN
    )


def mxu_dot_source(kind: str, name: str = "_mxu_dot") -> str:
    """`def name(a, b, dims)`: a kernel's dot of `kind` (dot_kind), f32 out."""
    where = "the host CPU" if kind == "f32_host" else "XLA computes it on a TPU"
    doc = textwrap.fill(f"The reference's dot as {where}: {_DOT_DOCS[kind]}.", 108, subsequent_indent="    ")
    head = f'def {name}(a, b, dims):\n    """{doc}"""\n'
    plain = "    return lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)\n"
    if kind in ("narrow", "f32_host"):
        return head + plain
    if kind == "bf16_1x":
        return head + "    a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)\n" + plain
    if kind == "bf16_3x":
        return head + (
            "    def split(v):  # v = head + tail, each bf16\n"
            "        head = v.astype(jnp.bfloat16)\n"
            "        return head, (v - head.astype(jnp.float32)).astype(jnp.bfloat16)\n\n"
            "    def dot(x, y):\n"
            "        return lax.dot_general(x, y, dims, preferred_element_type=jnp.float32)\n\n"
            "    (ah, al), (bh, bl) = split(a), split(b)\n"
            "    return dot(ah, bh) + (dot(ah, bl) + dot(al, bh))\n"
        )
    return head + (
        "    return lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)\n"
    )


def mxu_dots(kinds: Sequence[str]) -> tuple[str, list[str]]:
    """The defs of a kernel's dots of each kind (one `_mxu_dot` when they agree, else one per kind:
    `_mxu_dot_bf16_1x`, ...) and each dot's function name, in order."""
    distinct = sorted(set(kinds), key=DOT_KINDS.index)
    names = {k: "_mxu_dot" if len(distinct) == 1 else f"_mxu_dot_{k}" for k in distinct}
    return "\n\n".join(mxu_dot_source(k, names[k]) for k in distinct), [names[k] for k in kinds]


def _mosaic_dot_lines(
    e: Mapping[str, Any], params: dict, args: list[str], kind: str
) -> tuple[list[str], str]:
    """A body's f32 dot_general at the numerics of `kind` (dot_kind): (lines before it, its expression)."""
    kw = {k: v for k, v in params.items() if k != "precision"}
    if kind == "f32_host":
        return [], _call("dot_general", args, kw)
    if kind == "f32":
        kw["precision"] = "lax.Precision.HIGHEST"  # a pair or preset Mosaic cannot lower: full f32
        return [], _call("dot_general", args, kw)
    bf = [f"lax.convert_element_type({a}, jnp.bfloat16)" for a in args]
    if kind == "bf16_1x":
        return [], _call("dot_general", bf, kw)
    stem = e["outputs"][0]
    lines = []
    for tag, a, head in (("a", args[0], bf[0]), ("b", args[1], bf[1])):
        lines.append(f"{stem}_{tag}h = {head}  # bf16_3x: head and tail of each operand")
        lines.append(
            f"{stem}_{tag}l = lax.convert_element_type({a} - lax.convert_element_type({stem}_{tag}h, "
            f"jnp.float32), jnp.bfloat16)"
        )
    terms = [
        _call("dot_general", [f"{stem}_{x}", f"{stem}_{y}"], kw)
        for x, y in (("ah", "bh"), ("ah", "bl"), ("al", "bh"))
    ]
    return lines, f"{terms[0]} + ({terms[1]} + {terms[2]})"


def lane_window_sum(e: Mapping[str, Any], params: Mapping[str, str]) -> int | None:
    """The window k of a reduce_window that sums disjoint windows of a rank-2 value's last axis (window =
    stride = (1, k), no padding or dilation, init 0: an average pool's sum), else None."""
    try:
        win, strides = _tuple(params["window_dimensions"]), _tuple(params["window_strides"])
        pads = _tuple(params["padding"])
        dil = _tuple(params["base_dilation"]) + _tuple(params["window_dilation"])
        init = float(safe_ast.literal_eval(LITERAL_VALUE.match(e["inputs"][1]).group(1)))
    except (KeyError, ValueError, SyntaxError, AttributeError, TypeError):
        return None
    if params.get("jaxpr") != "lax.add" or init != 0.0 or len(win) != 2 or win != strides:
        return None
    if win[0] != 1 or win[1] < 2 or any(tuple(pd) != (0, 0) for pd in pads) or set(dil) != {1}:
        return None
    return int(win[1])


LITERAL_VALUE = re.compile(r"^lit:jnp\.asarray\((.+), jnp\.\w+\)$")


def _window_sum_lines(e: Mapping[str, Any], k: int, dtype: str) -> tuple[list[str], str]:
    """A sum over disjoint k-wide windows of the last axis as one MXU dot with the [N, N // k] 0/1 pooling
    matrix, f32 accumulated and rounded once. One dot at every size: chunking it into lane-dense pieces
    would concatenate them only where N // k exceeds a chunk, a program the small check sizes never run."""
    a, v = operand(e["inputs"][0]), e["outputs"][0]
    wide = is_wide(dtype)
    kind = "jnp.float32" if wide else f"jnp.{dtype}"
    precision = ", precision=lax.Precision.HIGHEST" if wide else ""  # exact sums of f32 values
    pre = [
        f"{v}_w = lax.div(lax.broadcasted_iota(jnp.int32, ({a}.shape[1], 1), 0), jnp.int32({k}))"
        f"  # each column's window (VALID: a last partial one matches no output)",
        f"{v}_p = lax.convert_element_type(lax.convert_element_type({v}_w == lax.broadcasted_iota(jnp.int32, "
        f"(1, {a}.shape[1] // {k}), 1), jnp.int32), {kind})  # [N, N // {k}] 0/1",
    ]
    dot = f"lax.dot_general({a}, {v}_p, (((1,), (0,)), ((), ())){precision}, preferred_element_type=jnp.float32)"
    return pre, f"lax.convert_element_type({dot}, jnp.{dtype})"


# top_k in a kernel body (Mosaic has no top_k): k rounds of max-and-mask over the row, for k up to this many
TOP_K_ROUNDS_MAX = 128
_FLOATS = ("float32", "bfloat16", "float16")


def top_k_in_kernel(e: Mapping[str, Any], dtype: str) -> bool:
    """Whether a top_k equation is written as max-and-mask rounds in a kernel: over the last axis of a
    float row, k at most TOP_K_ROUNDS_MAX (each round reads the whole row once more)."""
    if e["primitive"] != "top_k" or dtype not in _FLOATS or not e.get("out_specs"):
        return False
    rank = len(e["out_specs"][0]["shape"])
    axis = int(safe_ast.literal_eval(e["params"].get("axis", str(rank - 1))))
    return axis in (-1, rank - 1) and 0 < int(safe_ast.literal_eval(e["params"]["k"])) <= TOP_K_ROUNDS_MAX


def _top_k_lines(e: Mapping[str, Any], k: str, dtype: str) -> tuple[list[str], str]:
    """lax.top_k as k rounds over the row in VMEM: the largest untaken value, its first index, then that
    entry taken. Values are compared as order-preserving int32 keys of their f32 bits, so a taken entry
    sits below every value (-inf included) and ties go to the lowest index, as lax.top_k's do."""
    x, v = operand(e["inputs"][0]), e["outputs"][0]
    out_dtype = e["out_specs"][0]["dtype"]
    pre = [
        f"{v}_b = lax.bitcast_convert_type(lax.convert_element_type({x}, jnp.float32), jnp.int32)",
        f"{v}_key = lax.bitwise_xor({v}_b, lax.bitwise_and(lax.shift_right_arithmetic({v}_b, jnp.int32(31)), "
        "jnp.int32(0x7FFFFFFF)))  # int order = float order",
        f"{v}_n = lax.broadcasted_iota(jnp.int32, {v}_key.shape, {v}_key.ndim - 1)  # each entry's index",
        f"{v}_j = lax.broadcasted_iota(jnp.int32, {v}_key.shape[:-1] + ({k},), {v}_key.ndim - 1)  # each pick's slot",
        f"def {v}_round(j, c):  # one round: the largest untaken key, its first index, that entry taken",
        "    key, top, at = c",
        "    m = jnp.max(key, axis=-1, keepdims=True)  # [rows, 1]",
        f"    i = jnp.min(jnp.where(key == m, {v}_n, jnp.int32({v}_key.shape[-1])), axis=-1, keepdims=True)",
        f"    key = jnp.where({v}_n == i, jnp.int32(-(2**31)), key)",
        f"    return key, jnp.where({v}_j == j, m, top), jnp.where({v}_j == j, i, at)",
        f"_, {v}_t, {v}_i = lax.fori_loop(0, {k}, {v}_round, ({v}_key, jnp.zeros_like({v}_j), jnp.zeros_like({v}_j)))",
        f"{v}_tb = lax.bitwise_xor({v}_t, lax.bitwise_and(lax.shift_right_arithmetic({v}_t, jnp.int32(31)), "
        "jnp.int32(0x7FFFFFFF)))",
    ]
    val = f"lax.convert_element_type(lax.bitcast_convert_type({v}_tb, jnp.float32), jnp.{out_dtype})"
    return pre, f"({val}, {v}_i)"


def body_lines(
    program: Program,
    shape_of: Callable[[dict, str], str] | None = None,
    extra: Callable[[dict, str], str] | None = None,
    sym: Any = None,
    *,
    mosaic: bool = True,
) -> list[str]:
    """One `outs = lax.<prim>(...)` line per equation.

    `shape_of(eqn, param)` may rewrite a shape parameter (tiling); `extra(eqn, expr)` may rewrite a
    whole expression (an iota offset by the block's first row); `sym` (the offline model's `Symbolic`)
    writes every parameter and literal that follows the size from the input shapes. `mosaic=False` keeps
    every equation as traced (plain JAX, bit for bit); True rewrites the ones Mosaic cannot lower as they are.
    """
    lines = []
    dtypes = var_dtypes(program)
    for e in program["equations"]:
        if e["primitive"] in CONTROL and not mosaic:
            lines.extend(_control_lines(e))
            continue
        params = dict(e["params"])
        if sym is not None:
            params = {k: sym.param(e, k) for k in params}
            lits = [sym.literal(e, j) if a.startswith("lit:") else a for j, a in enumerate(e["inputs"])]
            e = {**e, "inputs": lits}
        if shape_of is not None and e["primitive"] in SHAPE_PARAMS:
            key = SHAPE_PARAMS[e["primitive"]]
            params[key] = shape_of(e, key)
        if shape_of is not None and e["primitive"] == "slice":
            params["limit_indices"] = shape_of(e, "limit_indices")
        out_dtype = e["out_specs"][0]["dtype"] if e["out_specs"] else ""
        merged = _merged_batch(e, params) if mosaic else None
        if merged is not None:
            lines.extend(merged[0])
            dtypes.update({m: dtypes[a] for m, a in zip(merged[1], e["inputs"], strict=True) if a in dtypes})
            e = {**e, "inputs": merged[1]}
        if not mosaic:
            expr = _call(e["primitive"], [operand(a) for a in e["inputs"]], params)
        elif e["primitive"] == "select_n" and out_dtype in ("bfloat16", "float16"):
            # exact in f32, and spares Mosaic a 32-bit mask relayout to 16-bit tiles
            cases = [f"lax.convert_element_type({operand(a)}, jnp.float32)" for a in e["inputs"][1:]]
            inner = _call("select_n", [operand(e["inputs"][0]), *cases], params)
            expr = f"lax.convert_element_type({inner}, jnp.{out_dtype})"
        elif e["primitive"] in ("select_n", "broadcast_in_dim") and out_dtype == "bool":
            # masks as int32 (exact): Mosaic cannot relayout every i1 vector it would need
            n = 1 if e["primitive"] == "select_n" else 0
            ins = [operand(a) for a in e["inputs"]]
            ins[n:] = [f"lax.convert_element_type({a}, jnp.int32)" for a in ins[n:]]
            expr = f"lax.ne({_call(e['primitive'], ins, params)}, jnp.int32(0))"
        elif (
            e["primitive"] in SCALAR_ON_VECTOR
            and e["out_specs"]
            and not any(s["shape"] for s in e["out_specs"])
        ):
            vectors = [f"jnp.full((1, 1), {operand(a)})" for a in e["inputs"]]
            expr = f"{_call(e['primitive'], vectors, params)}[0, 0]"
        elif e["primitive"] == "reduce_window" and (k := lane_window_sum(e, params)) is not None:
            # Mosaic has no reduce_window: a sum over windows of the last axis is a dot with a 0/1 matrix
            pre, expr = _window_sum_lines(e, k, dtypes.get(e["inputs"][0], out_dtype))
            lines.extend(pre)
        elif (
            mosaic
            and e["primitive"] == "top_k"
            and top_k_in_kernel(e, dtypes.get(operand(e["inputs"][0]), ""))
        ):
            pre, expr = _top_k_lines(e, params["k"], dtypes[e["inputs"][0]])
            lines.extend(pre)
        elif e["primitive"] == "dot_general" and dot_kind(program, e, dtypes) != "narrow":
            # f32 operands: the numerics XLA gives this dot on a TPU (one bf16 pass at DEFAULT, not Mosaic's f32)
            args = [operand(a) for a in e["inputs"]]
            pre, expr = _mosaic_dot_lines(e, params, args, dot_kind(program, e, dtypes))
            lines.extend(pre)
        elif e["primitive"] == "dot_general" and out_dtype in ("bfloat16", "float16"):
            # Mosaic's matmul accumulates in 32 bits: accumulate in f32, round once (as XLA does on TPU)
            params["preferred_element_type"] = "jnp.float32"
            args = [operand(a) for a in e["inputs"]]
            if e["primitive"] == "dot_general" and safe_ast.literal_eval(params["dimension_numbers"])[1][0]:
                # batched: XLA:CPU has no bf16 x bf16 -> f32 batched dot; f32 operands hold bf16 exactly
                args = [f"lax.convert_element_type({a}, jnp.float32)" for a in args]
            expr = f"lax.convert_element_type({_call(e['primitive'], args, params)}, jnp.{out_dtype})"
        else:
            expr = _call(e["primitive"], [operand(a) for a in e["inputs"]], params)
        if extra is not None:
            expr = extra(e, expr)
        outs = e["outputs"]
        target = outs[0] if len(outs) == 1 else ", ".join(outs)
        if merged is not None:
            lines.append(f"{target}_d = {expr}")
            expr = f"{target}_d.reshape({operand(e['inputs'][0])}.shape[:{merged[2]}] + {target}_d.shape[1:])"
            expr = expr.replace(f"{target}_l.shape", f"{merged[3]}.shape")
        lines.append(f"{target} = {expr}")
    return lines


def _tuple_of(names: Sequence[str]) -> str:
    return "(" + "".join(f"{operand(n)}, " for n in names).rstrip(" ") + ")"


def _local_fn(name: str, params: str, sub: Mapping[str, Any], ret: str, unpack: Sequence[tuple[list, str]]):
    """`def name(params):` unpacking its tuples, the body's own lines, and `return ret`."""
    lines = [f"def {name}({params}):"]
    lines += [f"    {_tuple_of(names)} = {src}" for names, src in unpack if names]
    lines += ["    " + ln for ln in body_lines({"equations": sub["equations"]}, mosaic=False)]
    lines.append(f"    return {ret}")
    return lines


def _control_lines(e: Mapping[str, Any]) -> list[str]:
    """A cond, scan or while as plain JAX: its bodies as local functions, the equation as lax.switch,
    lax.scan or lax.while_loop over them (the same primitive with the same bodies: bit for bit)."""
    prim, p, subs = e["primitive"], e["params"], e["subprograms"]
    ins, outs = [operand(a) for a in e["inputs"]], e["outputs"]
    stem = f"{outs[0]}_" if outs else "_"
    lines: list[str] = []
    if prim == "cond":  # lax.cond binds its predicate as an int32 index: lax.switch is the same primitive
        names = []
        for sub in subs:
            names.append(f"{stem}{sub['role']}")
            lines += _local_fn(names[-1], ", ".join(sub["inputs"]), sub, _tuple_of(sub["outputs"]), [])
        lines.append(f"{_tuple_of(outs)} = lax.switch({ins[0]}, ({', '.join(names)},), {', '.join(ins[1:])})")
        return lines
    if prim == "scan":
        nc, ncarry = int(p["num_consts"]), int(p["num_carry"])
        (sub,) = subs
        carry, xs = sub["inputs"][:ncarry], sub["inputs"][ncarry:]
        body_out = sub["outputs"]
        ret = f"{_tuple_of(body_out[:ncarry])}, {_tuple_of(body_out[ncarry:])}"
        lines += _local_fn(f"{stem}body", "carry, xs", sub, ret, [(carry, "carry"), (xs, "xs")])
        lines.append(
            f"{stem}c, {stem}ys = lax.scan({stem}body, {_tuple_of(ins[nc : nc + ncarry])}, "
            f"{_tuple_of(ins[nc + ncarry :])}, length={p['length']}, reverse={p['reverse']}, unroll={p['unroll']})"
        )
        if outs[:ncarry]:
            lines.append(f"{_tuple_of(outs[:ncarry])} = {stem}c")
        if outs[ncarry:]:
            lines.append(f"{_tuple_of(outs[ncarry:])} = {stem}ys")
        return lines
    cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])  # while
    cond, body = subs
    lines += _local_fn(f"{stem}cond", "carry", cond, operand(cond["outputs"][0]), [(cond["inputs"], "carry")])
    lines += _local_fn(f"{stem}body", "carry", body, _tuple_of(body["outputs"]), [(body["inputs"], "carry")])
    lines.append(f"{_tuple_of(outs)} = lax.while_loop({stem}cond, {stem}body, {_tuple_of(ins[cn + bn :])})")
    return lines


def _merged_batch(e: dict, params: dict) -> tuple[list[str], list[str], int, str] | None:
    """A dot_general with n >= 2 leading batch axes as one with a single merged batch axis (Mosaic's
    matmul takes at most one): (lines reshaping the operands, their new names, n, the lhs name).
    Rewrites `params` in place; the result is reshaped back by the caller."""
    if e["primitive"] != "dot_general":
        return None
    (lc, rc), (lb, rb) = safe_ast.literal_eval(params["dimension_numbers"])
    nb = len(lb)
    if nb < 2 or tuple(lb) != tuple(range(nb)) or tuple(rb) != tuple(range(nb)):
        return None
    a, b = (operand(x) for x in e["inputs"])
    out = e["outputs"][0]
    lines = [
        f"{out}_l = {a}.reshape((-1,) + {a}.shape[{nb}:])  # {nb} batch axes merged into one",
        f"{out}_r = {b}.reshape((-1,) + {b}.shape[{nb}:])",
    ]
    shift = nb - 1
    lc2, rc2 = tuple(c - shift for c in lc), tuple(c - shift for c in rc)
    params["dimension_numbers"] = repr(((lc2, rc2), ((0,), (0,))))
    return lines, [f"{out}_l", f"{out}_r"], nb, a


def census_text(program: Program, names: Sequence[str] | None = None) -> str:
    census = program.get("census", {})
    keys = names if names is not None else sorted(census, key=lambda k: -census[k])
    return ", ".join(k for k in keys)
