"""The ATen op table: each op of an exported PyTorch graph as one jnp expression (plus small helpers).

A handler gets the op's arguments by schema name (`a.raw("dim")`, rendered: `a.r("dim")`) and returns the
expression. Helpers used by an expression are copied into the written reference, so the port needs jax
only. An op missing here is named to the caller (`Unsupported`), never guessed.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any


class Unsupported(ValueError):
    """No jnp translation for this op (the message names it)."""


class RandomOp(ValueError):
    """The forward draws random numbers: no port can match it seed for seed."""


DTYPES = {
    "float32": "jnp.float32",
    "float64": "jnp.float32",  # narrowed: TPUs have no f64 (the port says so)
    "bfloat16": "jnp.bfloat16",
    "float16": "jnp.float16",
    "int64": "jnp.int32",  # narrowed
    "int32": "jnp.int32",
    "int16": "jnp.int16",
    "int8": "jnp.int8",
    "uint8": "jnp.uint8",
    "bool": "jnp.bool_",
}

HELPERS: dict[str, str] = {
    "_conv": '''
def _conv(x, w, b, stride, padding, dilation, groups):
    """torch's convN (NC... layout kept): stride/padding/dilation per spatial dim, or padding 'same'/'valid'."""
    n = x.ndim - 2
    spec = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}[n]
    stride = tuple(stride) * (n // len(stride)) if len(stride) < n else tuple(stride)
    dilation = tuple(dilation) * (n // len(dilation)) if len(dilation) < n else tuple(dilation)
    if isinstance(padding, str):
        pad = padding.upper()
    else:
        padding = tuple(padding) * (n // len(padding)) if len(padding) < n else tuple(padding)
        pad = [(p, p) for p in padding]
    y = jax.lax.conv_general_dilated(
        x, w, stride, pad, rhs_dilation=dilation, dimension_numbers=spec, feature_group_count=groups,
        precision=jax.lax.Precision.HIGHEST,
    )
    return y if b is None else y + b.reshape((1, -1) + (1,) * n)
''',
    "_conv_transpose": '''
def _conv_transpose(x, w, b, stride, padding, output_padding, groups, dilation):
    """torch's conv_transposeN as a dilated convolution: w is (Cin, Cout/groups, k...), flipped and swapped."""
    n = x.ndim - 2
    spec = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}[n]
    cin, cout_g = w.shape[0], w.shape[1]
    k = w.shape[2:]
    w = w.reshape((groups, cin // groups, cout_g) + k)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + k)
    w = jnp.flip(w, axis=tuple(range(2, 2 + n)))
    pad = [
        (dilation[i] * (k[i] - 1) - padding[i], dilation[i] * (k[i] - 1) - padding[i] + output_padding[i])
        for i in range(n)
    ]
    y = jax.lax.conv_general_dilated(
        x, w, (1,) * n, pad, lhs_dilation=tuple(stride), rhs_dilation=tuple(dilation),
        dimension_numbers=spec, feature_group_count=groups, precision=jax.lax.Precision.HIGHEST,
    )
    return y if b is None else y + b.reshape((1, -1) + (1,) * n)
''',
    "_batch_norm": '''
def _batch_norm(x, w, b, mean, var, eps):
    """BatchNorm in eval mode: the running statistics, per channel (dim 1)."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) * jax.lax.rsqrt(var.reshape(shape) + eps)
    if w is not None:
        y = y * w.reshape(shape)
    return y if b is None else y + b.reshape(shape)
''',
    "_layer_norm": """
def _layer_norm(x, normalized_shape, w, b, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    if w is not None:
        y = y * w
    return y if b is None else y + b
""",
    "_rms_norm": """
def _rms_norm(x, normalized_shape, w, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    eps = jnp.finfo(x.dtype).eps if eps is None else eps
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)
    return y if w is None else y * w
""",
    "_group_norm": """
def _group_norm(x, groups, w, b, eps):
    n, c = x.shape[:2]
    g = x.reshape((n, groups, -1))
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=-1, keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if w is not None:
        y = y * w.reshape(shape)
    return y if b is None else y + b.reshape(shape)
""",
    "_instance_norm": """
def _instance_norm(x, w, b, eps):
    axes = tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if w is not None:
        y = y * w.reshape(shape)
    return y if b is None else y + b.reshape(shape)
""",
    "_sdpa": '''
def _sdpa(q, k, v, mask, is_causal, scale):
    """torch's scaled_dot_product_attention (no dropout): softmax(q k^T * scale + mask) v."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = jnp.einsum("...qd,...kd->...qk", q, k, precision=jax.lax.Precision.HIGHEST) * scale
    if is_causal:
        keep = jnp.tril(jnp.ones((q.shape[-2], k.shape[-2]), bool))
        s = jnp.where(keep, s, -jnp.inf)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf) if mask.dtype == jnp.bool_ else s + mask
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("...qk,...kd->...qd", p, v, precision=jax.lax.Precision.HIGHEST)
''',
    "_pool": '''
def _pool(x, kind, kernel, stride, padding, dilation=1, ceil_mode=False, count_include_pad=True, divisor=None):
    """torch's max/avg poolNd over the trailing len(kernel) dims (ceil mode: max pooling only)."""
    n = len(kernel)
    stride = tuple(stride) if stride else tuple(kernel)
    stride = stride * n if len(stride) == 1 else stride
    padding = tuple(padding) * n if len(tuple(padding)) == 1 else tuple(padding)
    dilation = (dilation,) * n if isinstance(dilation, int) else tuple(dilation) * (n // len(tuple(dilation)))
    lead = x.ndim - n
    window = (1,) * lead + tuple(kernel)
    strides = (1,) * lead + stride
    dil = (1,) * lead + dilation
    pads = ((0, 0),) * lead + tuple((p, p) for p in padding)
    if ceil_mode:  # more windows on the right, each starting inside the input or its left padding
        extra = []
        for size, k, s, p, d in zip(x.shape[lead:], kernel, stride, padding, dilation):
            span = size + 2 * p - d * (k - 1) - 1
            out = -(-span // s) + 1
            if (out - 1) * s >= size + p:
                out -= 1
            extra.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p)))
        pads = ((0, 0),) * lead + tuple((p, p + e) for p, e in zip(padding, extra))
    if kind == "max":
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, pads, window_dilation=dil)
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, pads, window_dilation=dil)
    if divisor is not None:
        return total / divisor
    if count_include_pad:
        return total / math.prod(kernel)
    ones = jnp.ones(x.shape[lead:], x.dtype)
    count = jax.lax.reduce_window(ones, 0.0, jax.lax.add, tuple(kernel), stride, pads[lead:])
    return total / count
''',
    "_adaptive_avg": '''
def _adaptive_avg(x, out):
    """adaptive_avg_poolNd where each output size divides the input (the common 1x1 head included)."""
    n = len(out)
    lead = x.shape[: x.ndim - n]
    shape = lead
    for size, o in zip(x.shape[x.ndim - n :], out):
        shape = shape + (o, size // o)
    y = x.reshape(shape)
    return jnp.mean(y, axis=tuple(range(len(lead) + 1, len(shape), 2)))
''',
    "_expand": '''
def _expand(x, shape):
    """torch's expand: -1 keeps the dim; new leading dims broadcast."""
    shape = list(shape)
    off = len(shape) - x.ndim
    for i, s in enumerate(shape):
        if s == -1:
            shape[i] = x.shape[i - off]
    return jnp.broadcast_to(x, tuple(shape))
''',
    "_slice": """
def _slice(x, dim, start, end, step):
    dim = dim % x.ndim
    return x[(slice(None),) * dim + (slice(start, end, step),)]
""",
    "_split": '''
def _split(x, sizes, dim):
    """torch's split: an int is a chunk length (the last may be shorter), a list is the lengths."""
    n = x.shape[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    cuts = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
    return tuple(jnp.split(x, cuts, axis=dim))
''',
    "_flatten": """
def _flatten(x, start, end):
    start, end = start % max(x.ndim, 1), end % max(x.ndim, 1)
    return x.reshape(x.shape[:start] + (-1,) + x.shape[end + 1 :])
""",
    "_softplus": """
def _softplus(x, beta, threshold):
    return jnp.where(x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta)
""",
    "_squeeze": """
def _squeeze(x, dims):
    dims = tuple(d % x.ndim for d in dims if x.shape[d] == 1) if dims is not None else None
    return jnp.squeeze(x, axis=dims)
""",
}


class Args:
    """An op's arguments by schema name, raw and rendered."""

    def __init__(self, values: dict[str, Any], render: Callable[[Any], str], node: Any) -> None:
        self.values, self._render, self.node = values, render, node

    def raw(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def r(self, name: str, default: Any = None) -> str:
        return self._render(self.values.get(name, default))

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None

    @property
    def out_dtype(self) -> str | None:
        val = self.node.meta.get("val")
        return DTYPES.get(str(val.dtype).removeprefix("torch.")) if hasattr(val, "dtype") else None


OPS: dict[str, Callable[[Args], str]] = {}
USES: dict[str, tuple[str, ...]] = {}  # op -> helpers it needs


def op(*names: str, helpers: tuple[str, ...] = ()):
    def register(fn: Callable[[Args], str]) -> Callable[[Args], str]:
        for n in names:
            OPS[n] = fn
            USES[n] = helpers
        return fn

    return register


def _binary(sym: str):
    def f(a: Args) -> str:
        other = "other" if "other" in a.values else "exponent"
        alpha = a.raw("alpha", 1)
        rhs = a.r(other) if alpha in (1, None) else f"({a.r('alpha')} * {a.r(other)})"
        return f"({a.r('self')} {sym} {rhs})"

    return f


for _n, _s in (("add", "+"), ("sub", "-"), ("mul", "*"), ("bitwise_and", "&"), ("bitwise_or", "|")):
    op(_n)(_binary(_s))
    op(_n + "_")(_binary(_s))  # in place: functional here (the port says so)


@op("rsub")
def _rsub(a: Args) -> str:
    alpha = a.raw("alpha", 1)
    rhs = a.r("self") if alpha in (1, None) else f"({a.r('alpha')} * {a.r('self')})"
    return f"({a.r('other')} - {rhs})"


@op("div", "div_")
def _div(a: Args) -> str:
    mode = a.raw("rounding_mode")
    q = f"({a.r('self')} / {a.r('other')})"
    return {"trunc": f"jnp.trunc{q}", "floor": f"jnp.floor{q}"}.get(mode, q)


@op("pow")
def _pow(a: Args) -> str:
    base = a.r("self")
    exp = a.r("exponent")
    return f"jnp.power({base}, {exp})"


UNARY = {
    "neg": "jnp.negative", "exp": "jnp.exp", "log": "jnp.log", "log1p": "jnp.log1p", "expm1": "jnp.expm1",
    "sqrt": "jnp.sqrt", "rsqrt": "jax.lax.rsqrt", "abs": "jnp.abs", "sign": "jnp.sign", "tanh": "jnp.tanh",
    "sigmoid": "jax.nn.sigmoid", "relu": "jax.nn.relu", "relu6": "jax.nn.relu6", "silu": "jax.nn.silu",
    "erf": "jax.lax.erf", "sin": "jnp.sin", "cos": "jnp.cos", "reciprocal": "jnp.reciprocal",
    "square": "jnp.square", "floor": "jnp.floor", "ceil": "jnp.ceil", "round": "jnp.round",
    "logical_not": "jnp.logical_not", "isnan": "jnp.isnan", "selu": "jax.nn.selu", "tan": "jnp.tan",
    "hardsigmoid": "jax.nn.hard_sigmoid", "hardswish": "jax.nn.hard_swish", "log2": "jnp.log2",
    "exp2": "jnp.exp2", "atan": "jnp.arctan", "sinh": "jnp.sinh", "cosh": "jnp.cosh", "trunc": "jnp.trunc",
}  # fmt: skip
for _n, _f in UNARY.items():
    op(_n, _n + "_")(lambda a, _f=_f: f"{_f}({a.r('self')})")

COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
for _n, _s in COMPARE.items():
    op(_n)(lambda a, _s=_s: f"({a.r('self')} {_s} {a.r('other')})")
for _n in ("maximum", "minimum", "logical_and", "logical_or", "fmod", "remainder", "atan2"):
    _j = {"fmod": "jnp.fmod", "remainder": "jnp.remainder", "atan2": "jnp.arctan2"}.get(_n, f"jnp.{_n}")
    op(_n)(lambda a, _j=_j: f"{_j}({a.r('self')}, {a.r('other')})")


@op("gelu", "gelu_")
def _gelu(a: Args) -> str:
    approx = a.raw("approximate", "none") == "tanh"
    return f"jax.nn.gelu({a.r('self')}, approximate={approx})"


@op("mish", "mish_", helpers=("_softplus",))
def _mish(a: Args) -> str:
    return f"({a.r('self')} * jnp.tanh(_softplus({a.r('self')}, 1.0, 20.0)))"


@op("softplus", helpers=("_softplus",))
def _softplus(a: Args) -> str:
    return f"_softplus({a.r('self')}, {a.r('beta', 1.0)}, {a.r('threshold', 20.0)})"


@op("elu", "elu_")
def _elu(a: Args) -> str:
    x, alpha = a.r("self"), a.r("alpha", 1.0)
    return f"jnp.where({x} > 0, {x}, {alpha} * jnp.expm1({x}))"


@op("leaky_relu", "leaky_relu_")
def _leaky(a: Args) -> str:
    return f"jax.nn.leaky_relu({a.r('self')}, {a.r('negative_slope', 0.01)})"


@op("hardtanh", "hardtanh_")
def _hardtanh(a: Args) -> str:
    return f"jnp.clip({a.r('self')}, {a.r('min_val', -1.0)}, {a.r('max_val', 1.0)})"


@op("clamp", "clamp_", "clip")
def _clamp(a: Args) -> str:
    return f"jnp.clip({a.r('self')}, {a.r('min')}, {a.r('max')})"


@op("clamp_min", "clamp_min_")
def _clamp_min(a: Args) -> str:
    return f"jnp.maximum({a.r('self')}, {a.r('min')})"


@op("clamp_max", "clamp_max_")
def _clamp_max(a: Args) -> str:
    return f"jnp.minimum({a.r('self')}, {a.r('max')})"


@op("where")
def _where(a: Args) -> str:
    return f"jnp.where({a.r('condition')}, {a.r('self')}, {a.r('other')})"


@op("masked_fill", "masked_fill_")
def _masked_fill(a: Args) -> str:
    return f"jnp.where({a.r('mask')}, {a.r('value')}, {a.r('self')})"


@op("softmax", "_softmax")
def _softmax(a: Args) -> str:
    return f"jax.nn.softmax({a.r('self')}, axis={a.r('dim')})"


@op("log_softmax", "_log_softmax")
def _log_softmax(a: Args) -> str:
    return f"jax.nn.log_softmax({a.r('self')}, axis={a.r('dim')})"


@op("logsumexp")
def _logsumexp(a: Args) -> str:
    return f"jax.nn.logsumexp({a.r('self')}, axis=tuple({a.r('dim')}), keepdims={a.r('keepdim', False)})"


def _axes(a: Args, name: str = "dim") -> str:
    d = a.raw(name)
    if d is None or d == []:
        return "None"
    return a.r(name) if isinstance(d, int) else f"tuple({a.r(name)})"


def _reduce(fn: str):
    def f(a: Args) -> str:
        dtype = a.raw("dtype")
        cast = f".astype({DTYPES[str(dtype).removeprefix('torch.')]})" if dtype is not None else ""
        return f"{fn}({a.r('self')}{cast}, axis={_axes(a)}, keepdims={a.r('keepdim', False)})"

    return f


op("sum")(_reduce("jnp.sum"))
op("mean")(_reduce("jnp.mean"))
op("prod")(_reduce("jnp.prod"))
op("amax")(_reduce("jnp.max"))
op("amin")(_reduce("jnp.min"))


@op("max", "min")
def _max_min(a: Args) -> str:
    name = a.node.target.overloadpacket.__name__
    fn = {"max": "jnp.max", "min": "jnp.min"}[name]
    x = a.r("self")
    if "other" in a.values:
        return f"jnp.{name}imum({x}, {a.r('other')})"
    if "dim" not in a.values:
        return f"{fn}({x})"
    arg = {"max": "jnp.argmax", "min": "jnp.argmin"}[name]
    d, k = a.r("dim"), a.r("keepdim", False)
    return f"({fn}({x}, axis={d}, keepdims={k}), {arg}({x}, axis={d}, keepdims={k}).astype(jnp.int32))"


@op("argmax", "argmin")
def _argmax(a: Args) -> str:
    name = a.node.target.overloadpacket.__name__
    return f"jnp.{name}({a.r('self')}, axis={a.r('dim')}, keepdims={a.r('keepdim', False)}).astype(jnp.int32)"


def _var(fn: str):
    def f(a: Args) -> str:
        corr = a.raw("correction")
        ddof = (
            (1 if a.raw("unbiased", True) else 0) if corr is None and "correction" not in a.values else corr
        )
        ddof = 1 if ddof is None and a.raw("unbiased", True) else (ddof or 0)
        return f"{fn}({a.r('self')}, axis={_axes(a)}, ddof={ddof}, keepdims={a.r('keepdim', False)})"

    return f


op("var")(_var("jnp.var"))
op("std")(_var("jnp.std"))


@op("cumsum", "cumprod")
def _cumsum(a: Args) -> str:
    name = a.node.target.overloadpacket.__name__
    dtype = a.raw("dtype")
    cast = f".astype({DTYPES[str(dtype).removeprefix('torch.')]})" if dtype is not None else ""
    return f"jnp.{name}({a.r('self')}{cast}, axis={a.r('dim')})"


@op("bitwise_not")
def _bitwise_not(a: Args) -> str:
    return f"jnp.invert({a.r('self')})"  # logical not on a bool mask (`~mask`)


@op("bitwise_xor", "logical_xor")
def _xor(a: Args) -> str:
    return f"({a.r('self')} ^ {a.r('other')})"


@op("gather")
def _gather(a: Args) -> str:
    return f"jnp.take_along_axis({a.r('self')}, {a.r('index')}, axis={a.r('dim')})"


@op("linalg_vector_norm", "norm")
def _vector_norm(a: Args) -> str:
    p = a.raw("ord", a.raw("p", 2))
    p = 2 if p is None else p
    ordtext = "jnp.inf" if p == math.inf else ("-jnp.inf" if p == -math.inf else repr(p))
    return f"jnp.linalg.vector_norm({a.r('self')}, ord={ordtext}, axis={_axes(a)}, keepdims={a.r('keepdim', False)})"


HI = "precision=jax.lax.Precision.HIGHEST"


@op("linear")
def _linear(a: Args) -> str:
    y = f"jnp.matmul({a.r('input')}, jnp.swapaxes({a.r('weight')}, -1, -2), {HI})"
    return f"({y} + {a.r('bias')})" if a.has("bias") else y


@op("matmul", "mm", "bmm")
def _matmul(a: Args) -> str:
    other = "other" if "other" in a.values else "mat2"
    return f"jnp.matmul({a.r('self')}, {a.r(other)}, {HI})"


@op("addmm", "baddbmm", "addbmm")
def _addmm(a: Args) -> str:
    m1 = "mat1" if "mat1" in a.values else "batch1"
    m2 = "mat2" if "mat2" in a.values else "batch2"
    prod = f"jnp.matmul({a.r(m1)}, {a.r(m2)}, {HI})"
    beta, alpha = a.raw("beta", 1), a.raw("alpha", 1)
    prod = prod if alpha == 1 else f"{a.r('alpha')} * {prod}"
    base = a.r("self") if beta == 1 else f"{a.r('beta')} * {a.r('self')}"
    return f"({base} + {prod})"


@op("einsum")
def _einsum(a: Args) -> str:
    return f"jnp.einsum({a.r('equation')}, *{a.r('tensors')}, {HI})"


@op("conv1d", "conv2d", "conv3d", helpers=("_conv",))
def _convn(a: Args) -> str:
    return (
        f"_conv({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {a.r('stride', [1])}, "
        f"{a.r('padding', [0])}, {a.r('dilation', [1])}, {a.r('groups', 1)})"
    )


@op("conv_transpose1d", "conv_transpose2d", "conv_transpose3d", helpers=("_conv_transpose",))
def _conv_t(a: Args) -> str:
    n = len(a.raw("weight").meta["val"].shape) - 2

    def per(name: str, default: int) -> str:
        v = a.raw(name, [default])
        v = [v] if isinstance(v, int) else list(v)
        return repr(tuple(v * (n // len(v)) if len(v) < n else v))

    return (
        f"_conv_transpose({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {per('stride', 1)}, "
        f"{per('padding', 0)}, {per('output_padding', 0)}, {a.r('groups', 1)}, {per('dilation', 1)})"
    )


@op("convolution", helpers=("_conv", "_conv_transpose"))
def _convolution(a: Args) -> str:
    if a.raw("transposed"):
        return (
            f"_conv_transpose({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {a.r('stride')}, "
            f"{a.r('padding')}, {a.r('output_padding')}, {a.r('groups')}, {a.r('dilation')})"
        )
    return (
        f"_conv({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {a.r('stride')}, {a.r('padding')}, "
        f"{a.r('dilation')}, {a.r('groups')})"
    )


@op("batch_norm", helpers=("_batch_norm",))
def _bn(a: Args) -> str:
    if a.raw("training"):
        raise Unsupported("aten.batch_norm in training mode (the port runs the source in eval mode)")
    return (
        f"_batch_norm({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {a.r('running_mean')}, "
        f"{a.r('running_var')}, {a.r('eps')})"
    )


@op("_native_batch_norm_legit_no_training", helpers=("_batch_norm",))
def _bn_core(a: Args) -> str:
    return (
        f"(_batch_norm({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {a.r('running_mean')}, "
        f"{a.r('running_var')}, {a.r('eps')}), None, None)"
    )


@op("layer_norm", helpers=("_layer_norm",))
def _ln(a: Args) -> str:
    return f"_layer_norm({a.r('input')}, {a.r('normalized_shape')}, {a.r('weight')}, {a.r('bias')}, {a.r('eps')})"


@op("native_layer_norm", helpers=("_layer_norm",))
def _ln_core(a: Args) -> str:
    return (
        f"(_layer_norm({a.r('input')}, {a.r('normalized_shape')}, {a.r('weight')}, {a.r('bias')}, "
        f"{a.r('eps')}), None, None)"
    )


@op("rms_norm", helpers=("_rms_norm",))
def _rms(a: Args) -> str:
    return f"_rms_norm({a.r('input')}, {a.r('normalized_shape')}, {a.r('weight')}, {a.r('eps')})"


@op("group_norm", helpers=("_group_norm",))
def _gn(a: Args) -> str:
    return f"_group_norm({a.r('input')}, {a.r('num_groups')}, {a.r('weight')}, {a.r('bias')}, {a.r('eps')})"


@op("instance_norm", helpers=("_instance_norm",))
def _in(a: Args) -> str:
    if not a.raw("use_input_stats"):
        raise Unsupported("aten.instance_norm with running statistics")
    return f"_instance_norm({a.r('input')}, {a.r('weight')}, {a.r('bias')}, {a.r('eps')})"


@op("scaled_dot_product_attention", helpers=("_sdpa",))
def _attention(a: Args) -> str:
    if a.raw("dropout_p", 0.0):
        raise RandomOp("aten.scaled_dot_product_attention with dropout_p > 0 draws random numbers")
    if a.raw("enable_gqa", False):
        raise Unsupported("aten.scaled_dot_product_attention with enable_gqa")
    return (
        f"_sdpa({a.r('query')}, {a.r('key')}, {a.r('value')}, {a.r('attn_mask')}, "
        f"{a.r('is_causal', False)}, {a.r('scale')})"
    )


@op("max_pool1d", "max_pool2d", "max_pool3d", helpers=("_pool",))
def _maxpool(a: Args) -> str:
    return (
        f"_pool({a.r('self')}, 'max', {a.r('kernel_size')}, {a.r('stride')}, {a.r('padding', [0])}, "
        f"{a.r('dilation', [1])}, {a.r('ceil_mode', False)})"
    )


@op("avg_pool1d", "avg_pool2d", "avg_pool3d", helpers=("_pool",))
def _avgpool(a: Args) -> str:
    if a.raw("ceil_mode"):
        raise Unsupported(f"aten.{a.node.target.overloadpacket.__name__} with ceil_mode=True")
    return (
        f"_pool({a.r('self')}, 'avg', {a.r('kernel_size')}, {a.r('stride')}, {a.r('padding', [0])}, 1, "
        f"False, {a.r('count_include_pad', True)}, {a.r('divisor_override')})"
    )


@op("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d",
    helpers=("_adaptive_avg",))  # fmt: skip
def _adaptive(a: Args) -> str:
    x = a.raw("self").meta["val"]
    out = list(a.raw("output_size"))
    spatial = list(x.shape[x.dim() - len(out) :])
    if any(int(s) % int(o) for s, o in zip(spatial, out, strict=True)):
        raise Unsupported(f"aten.adaptive_avg_pool to {out} from {spatial} (sizes that do not divide)")
    return f"_adaptive_avg({a.r('self')}, {a.r('output_size')})"


@op("view", "reshape", "_unsafe_view", "_reshape_alias")
def _view(a: Args) -> str:
    return f"jnp.reshape({a.r('self')}, {a.r('size' if 'size' in a.values else 'shape')})"


@op("view_as", "reshape_as")
def _view_as(a: Args) -> str:
    return f"jnp.reshape({a.r('self')}, {a.r('other')}.shape)"


@op("permute")
def _permute(a: Args) -> str:
    return f"jnp.transpose({a.r('self')}, {a.r('dims')})"


@op("transpose", "swapaxes")
def _transpose(a: Args) -> str:
    return f"jnp.swapaxes({a.r('self')}, {a.r('dim0')}, {a.r('dim1')})"


@op("t", "numpy_T")
def _t(a: Args) -> str:
    return f"jnp.transpose({a.r('self')})"


@op("unsqueeze")
def _unsqueeze(a: Args) -> str:
    return f"jnp.expand_dims({a.r('self')}, {a.r('dim')})"


@op("squeeze", helpers=("_squeeze",))
def _squeeze(a: Args) -> str:
    d = a.raw("dim")
    dims = "None" if d is None else (f"({a.r('dim')},)" if isinstance(d, int) else a.r("dim"))
    return f"_squeeze({a.r('self')}, {dims})"


@op("expand", helpers=("_expand",))
def _expand_op(a: Args) -> str:
    return f"_expand({a.r('self')}, {a.r('size')})"


@op("expand_as")
def _expand_as(a: Args) -> str:
    return f"jnp.broadcast_to({a.r('self')}, {a.r('other')}.shape)"


@op("flatten", helpers=("_flatten",))
def _flatten_op(a: Args) -> str:
    return f"_flatten({a.r('self')}, {a.r('start_dim', 0)}, {a.r('end_dim', -1)})"


@op("cat", "concat", "concatenate")
def _cat(a: Args) -> str:
    return f"jnp.concatenate({a.r('tensors')}, axis={a.r('dim', 0)})"


@op("stack")
def _stack(a: Args) -> str:
    return f"jnp.stack({a.r('tensors')}, axis={a.r('dim', 0)})"


@op("split", "split_with_sizes", helpers=("_split",))
def _split_op(a: Args) -> str:
    sizes = "split_size" if "split_size" in a.values else "split_sizes"
    return f"_split({a.r('self')}, {a.r(sizes)}, {a.r('dim', 0)})"


@op("chunk")
def _chunk(a: Args) -> str:
    return f"tuple(jnp.array_split({a.r('self')}, {a.r('chunks')}, axis={a.r('dim', 0)}))"


@op("unbind")
def _unbind(a: Args) -> str:
    x, d = a.r("self"), a.r("dim", 0)
    return f"tuple(jnp.moveaxis({x}, {d}, 0))"


@op("slice", helpers=("_slice",))
def _slice_op(a: Args) -> str:
    return f"_slice({a.r('self')}, {a.r('dim', 0)}, {a.r('start')}, {a.r('end')}, {a.r('step', 1)})"


@op("narrow", helpers=("_slice",))
def _narrow(a: Args) -> str:
    s = a.r("start")
    return f"_slice({a.r('self')}, {a.r('dim')}, {s}, {s} + {a.r('length')}, 1)"


@op("select")
def _select(a: Args) -> str:
    return f"jnp.take({a.r('self')}, {a.r('index')}, axis={a.r('dim')})"


@op("index")
def _index(a: Args) -> str:
    idx = ", ".join("slice(None)" if i is None else a._render(i) for i in a.raw("indices"))
    return f"{a.r('self')}[({idx},)]"


@op("embedding")
def _embedding(a: Args) -> str:
    return f"jnp.take({a.r('weight')}, {a.r('indices')}, axis=0)"


@op("repeat")
def _repeat(a: Args) -> str:
    return f"jnp.tile({a.r('self')}, {a.r('repeats')})"


@op("flip")
def _flip(a: Args) -> str:
    return f"jnp.flip({a.r('self')}, axis=tuple({a.r('dims')}))"


@op("roll")
def _roll(a: Args) -> str:
    return f"jnp.roll({a.r('self')}, {a.r('shifts')}, axis={a.r('dims')})"


@op("tril", "triu")
def _tril(a: Args) -> str:
    name = a.node.target.overloadpacket.__name__
    return f"jnp.{name}({a.r('self')}, {a.r('diagonal', 0)})"


@op("contiguous", "clone", "detach", "alias", "lift_fresh_copy", "lift_fresh", "_assert_tensor_metadata")
def _identity(a: Args) -> str:
    return a.r("self") if "self" in a.values else "None"


@op("dropout", "feature_dropout", "alpha_dropout")
def _dropout(a: Args) -> str:
    if a.raw("train"):
        raise RandomOp("aten.dropout in training mode draws random numbers")
    return a.r("input")


@op("_to_copy", "to", "type_as", "_to_dtype")
def _to(a: Args) -> str:
    if "other" in a.values:
        return f"{a.r('self')}.astype({a.r('other')}.dtype)"
    dtype = a.raw("dtype")
    if dtype is None:
        return a.r("self")
    return f"{a.r('self')}.astype({DTYPES[str(dtype).removeprefix('torch.')]})"


def _creation_dtype(a: Args) -> str:
    return a.out_dtype or "jnp.float32"


@op("full")
def _full(a: Args) -> str:
    return f"jnp.full({a.r('size')}, {a.r('fill_value')}, {_creation_dtype(a)})"


@op("zeros", "ones")
def _zeros(a: Args) -> str:
    name = a.node.target.overloadpacket.__name__
    return f"jnp.{name}({a.r('size')}, {_creation_dtype(a)})"


@op("full_like", "zeros_like", "ones_like")
def _like(a: Args) -> str:
    name = a.node.target.overloadpacket.__name__
    value = a.r("fill_value") if name == "full_like" else ("0" if name == "zeros_like" else "1")
    return f"jnp.full_like({a.r('self')}, {value}, {_creation_dtype(a)})"


@op("arange")
def _arange(a: Args) -> str:
    start = a.r("start", 0)
    return f"jnp.arange({start}, {a.r('end')}, {a.r('step', 1)}, {_creation_dtype(a)})"


@op("scalar_tensor")
def _scalar_tensor(a: Args) -> str:
    return f"jnp.asarray({a.r('s')}, {_creation_dtype(a)})"


@op("sym_size")
def _sym_size(a: Args) -> str:
    return f"{a.r('self')}.shape[{a.r('dim')}]"


# plain Python operators on sizes (a dynamic batch: sym_size * 4) and tuple outputs
PY_OPS: dict[Any, str] = {
    operator.mul: "({0} * {1})",
    operator.add: "({0} + {1})",
    operator.sub: "({0} - {1})",
    operator.floordiv: "({0} // {1})",
    operator.truediv: "({0} / {1})",
    operator.getitem: "{0}[{1}]",
    operator.neg: "(-{0})",
    math.ceil: "math.ceil({0})",
}
