"""An LM head's matmul into a cross entropy, from a traced program: the [B, V] logits never reach HBM.

Serves a program with one dot_general, hidden [B, H] x weight [H, V] (or [V, H]: tied embeddings), whose
logits go through a log-sum-exp over V (reduce_max, exp, reduce_sum, log) and have one entry per row
picked at an integer label input [B] (a gather: take_along_axis, either from the log-softmax or from the
logits), then, per row, that entry's difference from the log-sum-exp (either sign), then the mean or the
sum over the rows, or nothing (per-token losses). The logits may be scaled first by a scalar: a
temperature or a step-dependent factor (a 0-d input, read from SMEM: templates/scalars.py) or a constant,
divided or multiplied in. At a production vocabulary (Llama 3's 128256) the
logits are 2 GiB in bf16: the fused templates, which keep a row's columns whole, cannot hold one row
block, so this is the kernel an expert writes instead (the online softmax over vocab tiles).

Anything else returns None, and the other matmul templates are tried. Whether the program really is this
(the sign, the mean's divisor) is checked here from its equations; the validation against the reference
is the verdict.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates import scalars
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.flash_program import Graph, lit_value
from maxkernel.clients.offline.templates.row_blocks import itemsize
from maxkernel.tpu_tools.problem.emit import Program, dot_kind, dot_time_factor, mxu_dot_note, mxu_dot_source

SOURCE = '''"""Cross entropy over an LM head (offline template `cross_entropy`), generated from the reference's program.

Grid (token blocks, vocab blocks), vocab innermost and "arbitrary": for a block of tokens the weight's
vocab tiles stream past while f32 VMEM scratch keeps each token's running max, its running sum of
exponentials (rescaled when the max grows: the online softmax) and the logit at its label (found in
whichever tile holds it). After the last vocab tile each token's value, ${value_note}, is stored; the
[B, V] logits never leave VMEM. Token blocks are independent ("parallel": a chip with two TensorCores
splits them). ${reduce_note} The dot runs as XLA runs the reference's on a TPU (`_mxu_dot`: ${dot_note});
its result is rounded to ${logit_dtype} before the softmax, as the reference's dot rounds it.

Shape-generic: B, H and V are read from the inputs when the kernel is traced; the blocks were chosen for
the target size (${target}) and clamp to smaller inputs. A last vocab tile past V is masked to -inf
(its columns add nothing); a last token block past B is partial (the store drops the rest).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_T = ${block_t}
BLOCK_V = ${block_v}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
WEIGHT_VH = ${weight_vh}  # the weight is [V, H]: logits = hidden @ weight.T
SIGN = ${sign}  # a token's value: SIGN * (logit at its label - log-sum-exp of its logits)


${mxu_dot}


def _kernel(h_ref, w_ref, label_ref, ${scale_ref}o_ref, max_ref, sum_ref, picked_ref, *, v_total):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        max_ref[...] = jnp.full_like(max_ref, -jnp.inf)
        sum_ref[...] = jnp.zeros_like(sum_ref)
        picked_ref[...] = jnp.zeros_like(picked_ref)

    dims = (((1,), (1,)), ((), ())) if WEIGHT_VH else (((1,), (0,)), ((), ()))
    logits = _mxu_dot(h_ref[...], w_ref[...], dims)  # [bt, bv] f32
    logits = logits.astype(jnp.${logit_dtype}).astype(jnp.float32)  # the reference's dot output dtype
${scale_line}    cols = j * logits.shape[1] + lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    logits = jnp.where(cols < v_total, logits, -jnp.inf)  # a tile past V: those columns count for nothing
    picked_ref[...] += jnp.sum(jnp.where(cols == label_ref[...], logits, 0.0), axis=1, keepdims=True)
    prev = max_ref[...]
    new = jnp.maximum(prev, jnp.max(logits, axis=1, keepdims=True))  # finite from the first tile on
    sum_ref[...] = sum_ref[...] * jnp.exp(prev - new) + jnp.sum(jnp.exp(logits - new), axis=1, keepdims=True)
    max_ref[...] = new

    @pl.when(j == pl.num_programs(1) - 1)
    def _store():
        lse = max_ref[...] + jnp.log(sum_ref[...])
        o_ref[...] = SIGN * (picked_ref[...] - lse)


def token_values(hidden, weight, labels${scale_param}):
    """[B] f32: each token's SIGN * (logit at its label - log-sum-exp), one Pallas kernel."""
    b, h = hidden.shape
    v = weight.shape[0] if WEIGHT_VH else weight.shape[1]
    bt, bv = min(BLOCK_T, b), min(BLOCK_V, v)
    labels = labels.astype(jnp.int32)
    labels = jnp.where(labels < 0, labels + v, labels).reshape(b, 1)  # a negative label counts from the end
    if WEIGHT_VH:
        w_spec = pl.BlockSpec((bv, h), lambda i, j: (j, 0))
    else:
        w_spec = pl.BlockSpec((h, bv), lambda i, j: (0, j))
    out = pl.pallas_call(
        functools.partial(_kernel, v_total=v),
        out_shape=jax.ShapeDtypeStruct((b, 1), jnp.float32),
        grid=(pl.cdiv(b, bt), pl.cdiv(v, bv)),
        in_specs=[pl.BlockSpec((bt, h), lambda i, j: (i, 0)), w_spec, pl.BlockSpec((bt, 1), lambda i, j: (i, 0))${scale_spec}],
        out_specs=pl.BlockSpec((bt, 1), lambda i, j: (i, 0)),
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32) for _ in range(3)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        name="offline_cross_entropy",
    )(hidden, weight, labels${scale_arg})
    return out[:, 0]


def workload(${args}):
    values = token_values(${hidden}, ${weight}, ${labels}${scale_call})
${reduce_lines}
'''

TOKEN_BLOCKS = (128, 256, 512, 1024, 2048)
VOCAB_BLOCKS = (128, 256, 512, 768, 1024, 1536, 2048)
_FIRST_VMEM = 40 * MiB  # the matmul templates' rule: an upper bound under every chip's kernel limit
_ALLOWED = {
    "dot_general", "reduce_max", "max", "broadcast_in_dim", "stop_gradient", "sub", "add", "exp", "log",
    "convert_element_type", "reduce_sum", "lt", "select_n", "reshape", "squeeze", "gather", "neg", "div",
    "mul", "is_finite", "expand_dims", "log1p", "sign", "abs", "transpose",
}  # fmt: skip
_LABEL_PATH = {"broadcast_in_dim", "lt", "add", "select_n", "reshape", "convert_element_type", "expand_dims"}
_LOSS_PATH = {"squeeze", "convert_element_type", "neg", "sub", "reshape", "broadcast_in_dim"}


def _inputs_of(g: Graph, var: str, names: list[str]) -> set[str]:
    """The program inputs `var` is computed from."""
    found = {var} & set(names)
    for i in g.ancestors(var):
        found |= {a for a in g.eqns[i]["inputs"] if a in names}
    return found


def recognise(program: Program, sym: Symbolic) -> dict[str, Any] | None:
    """The hidden, weight and label inputs, the weight's layout, the sign and the reduction, or None."""
    g = Graph(program)
    eqns, names = g.eqns, list(program["input_names"])
    shapes = {n: s["shape"] for n, s in zip(names, program["inputs"], strict=True)}
    dtypes = {n: s["dtype"] for n, s in zip(names, program["inputs"], strict=True)}
    prims = {e["primitive"] for e in eqns}
    if not prims <= _ALLOWED or not {"reduce_max", "exp", "reduce_sum", "log", "gather"} <= prims:
        return None
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general"]
    gathers = [i for i, e in enumerate(eqns) if e["primitive"] == "gather"]
    if len(dots) != 1 or len(gathers) != 1 or len(program["outputs"]) != 1:
        return None
    dot = eqns[dots[0]]
    hidden, weight = dot["inputs"][:2]
    transposed = False
    t = g.producer.get(weight)
    if t is not None and eqns[t]["primitive"] == "transpose":  # `h @ w.T`: the [V, H] weight read as it is
        if ast.literal_eval(eqns[t]["params"].get("permutation", "None")) != (1, 0):
            return None
        weight, transposed = eqns[t]["inputs"][0], True
        if any(weight in e["inputs"] for i, e in enumerate(eqns) if i != t):
            return None
    if hidden not in names or weight not in names or hidden == weight:
        return None
    (lc, rc), (lb, rb) = ast.literal_eval(dot["params"]["dimension_numbers"])
    if len(shapes[hidden]) != 2 or len(shapes[weight]) != 2 or lb or rb or tuple(lc) != (1,):
        return None
    if tuple(rc) not in ((0,), (1,)):
        return None
    weight_vh = (tuple(rc) == (1,)) != transposed
    scale = _logit_scale(g, dot["outputs"][0], names, shapes, sym)
    if scale is False:
        return None
    b = shapes[hidden][0]
    v = shapes[weight][0] if weight_vh else shapes[weight][1]
    for e in eqns:  # the softmax's reductions run over the vocab axis of a [B, V] value
        if e["primitive"] in ("reduce_max", "reduce_sum") and g.shape(e["inputs"][0]) == [b, v]:
            if ast.literal_eval(e["params"]["axes"]) != (1,):
                return None
    gather = eqns[gathers[0]]
    operand, idx = gather["inputs"][:2]
    dn = gather["params"].get("dimension_numbers", "").replace(" ", "")
    if "collapsed_slice_dims=(1,)" not in dn or "start_index_map=(1,)" not in dn:
        return None
    if ast.literal_eval(gather["params"].get("slice_sizes", "None") or "None") != (1, 1):
        return None
    if any(eqns[i]["primitive"] not in _LABEL_PATH for i in g.ancestors(idx)):
        return None
    label_inputs = _inputs_of(g, idx, names)
    if len(label_inputs) != 1:
        return None
    labels = label_inputs.pop()
    if shapes[labels] != [b] or "int" not in dtypes[labels]:
        return None
    up = g.ancestors(operand)
    if dots[0] not in up:
        return None
    from_log = any(eqns[i]["primitive"] == "log" for i in up)  # the log-softmax's entry, else the logit's
    # From the gather to the output: the per-token value's sign, then the reduction over tokens.
    sign, cur, reduce = 1, gather["outputs"][0], "none"  # the picked entry's coefficient so far
    scale_eqn = None
    while cur not in program["outputs"]:
        nxt = g.users.get(cur, [])
        if len(nxt) != 1:
            return None
        e = eqns[nxt[0]]
        p = e["primitive"]
        if reduce == "none" and p in _LOSS_PATH:
            if p == "neg":
                sign = -sign
            elif p == "sub":
                other = e["inputs"][1] if e["inputs"][0] == cur else e["inputs"][0]
                if from_log or not any(eqns[i]["primitive"] == "log" for i in g.ancestors(other)):
                    return None  # only the logit form subtracts, and only the log-sum-exp
                if e["inputs"][1] == cur:
                    sign = -sign
                from_log = True
        elif reduce == "none" and p == "reduce_sum" and e["out_specs"][0]["shape"] == []:
            reduce = "sum"
        elif reduce == "sum" and p == "div" and e["inputs"][0] == cur and scale_eqn is None:
            scale_eqn = e
            reduce = "mean"
        elif reduce != "none" and p == "convert_element_type":
            pass
        else:
            return None
        cur = e["outputs"][0]
    if not from_log:
        return None  # a picked logit never met the log-sum-exp
    if scale_eqn is not None:  # the divisor must be B at every traced size
        for text, at_b in zip(
            sym.literal_texts(scale_eqn, 1), _b_per_size(sym, names.index(hidden)), strict=True
        ):
            if not text.startswith("lit:") or lit_value(text) != float(at_b):
                return None
    out_shape = program["out_specs"][0]["shape"]
    if (reduce == "none") != (out_shape == [b]):
        return None
    return {
        "hidden": hidden,
        "weight": weight,
        "labels": labels,
        "weight_vh": weight_vh,
        "sign": sign,
        "reduce": reduce,
        "dot": dots[0],
        "out_dtype": program["out_specs"][0]["dtype"],
        "logit_dtype": dot["out_specs"][0]["dtype"],
        "scale": scale,
    }


def _logit_scale(
    g: Graph, logits: str, names: list[str], shapes: Mapping[str, list], sym: Symbolic
) -> dict | None | bool:
    """How the logits are scaled before the softmax: None (not at all), {"op": div|mul, "input": a 0-d
    input's name | "value": a literal, "dtype"}, or False when the dot's result meets anything else first
    (a scale this template would drop: the kernel would be wrong, so another template is tried)."""
    users = g.users.get(logits, [])
    scaling = [i for i in users if g.eqns[i]["primitive"] in ("div", "mul")]
    if not scaling:
        return None
    if len(users) != 1:
        return False
    e = g.eqns[scaling[0]]
    a, b = e["inputs"]
    if e["primitive"] == "div" and a != logits:
        return False  # c / logits is no scale
    other = b if a == logits else a
    out = {"op": e["primitive"], "dtype": e["out_specs"][0]["dtype"]}
    if other in names and shapes[other] == []:
        return {**out, "input": other}
    if other.startswith("lit:"):
        texts = set(sym.literal_texts(e, e["inputs"].index(other)))
        return {**out, "value": lit_value(other)} if len(texts) == 1 else False  # one constant at every size
    return False


def _b_per_size(sym: Symbolic, hidden_index: int) -> list[int]:
    return [sym.at(s)["inputs"][hidden_index]["shape"][0] for s in sym.sizes]


def _scale_parts(program: Program, scale: Mapping[str, Any] | None) -> dict[str, str]:
    """The template's scale placeholders: empty without one; a 0-d input travels as one SMEM word."""
    keys = ("scale_ref", "scale_line", "scale_param", "scale_spec", "scale_arg", "scale_call")
    parts = dict.fromkeys(keys, "")
    if scale is None:
        return parts
    sign = "/" if scale["op"] == "div" else "*"

    def line(factor: str, why: str) -> str:
        expr = f"logits {sign} {factor}"
        if scale["dtype"] != "float32":  # rounded as the reference's scaled logits are
            expr = f"({expr}).astype(jnp.{scale['dtype']}).astype(jnp.float32)"
        return f"    logits = {expr}  # {why}\n"

    if "input" not in scale:
        parts["scale_line"] = line(f"jnp.float32({scale['value']!r})", "the reference's constant scale")
        return parts
    name = scale["input"]
    spec = program["inputs"][list(program["input_names"]).index(name)]
    value = scalars.load("scale_ref", spec)
    if spec["dtype"] != "float32":
        value = f"{value}.astype(jnp.float32)"
    parts |= {
        "scale_ref": "scale_ref, ",
        "scale_line": line(value, f"the scalar {name} ({spec['dtype']}[]), one SMEM word"),
        "scale_param": ", scale",
        "scale_spec": f", {scalars.SMEM_SPEC}",
        "scale_arg": f", {scalars.arg('scale', spec)}",
        "scale_call": f", {name}",
    }
    return parts


def _reduce_lines(found: Mapping[str, Any]) -> str:
    dtype = found["out_dtype"]
    if found["reduce"] == "none":
        return f"    return values.astype(jnp.{dtype})"
    total = "jnp.sum(values)"
    if found["reduce"] == "mean":
        return f"    return ({total} / values.shape[0]).astype(jnp.{dtype})  # the mean over tokens, in f32"
    return f"    return {total}.astype(jnp.{dtype})  # the sum over tokens, in f32"


def build(program: Program, sym: Symbolic) -> Template | None:
    found = recognise(program, sym)
    if found is None:
        return None
    names = list(program["input_names"])
    at = {n: s for n, s in zip(names, sym.at(sym.target)["inputs"], strict=True)}
    b, h = at[found["hidden"]]["shape"]
    ws = at[found["weight"]]["shape"]
    v = ws[0] if found["weight_vh"] else ws[1]
    item_h, item_w = itemsize(at[found["hidden"]]["dtype"]), itemsize(at[found["weight"]]["dtype"])
    kind = dot_kind(program, program["equations"][found["dot"]])
    factor = dot_time_factor(kind)

    def blocks(c: Mapping[str, Any]) -> tuple[int, int]:
        return min(int(c["block_t"]), b), min(int(c["block_v"]), v)

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bt, bv = blocks(c)
        # two buffers of each operand block, one f32 logits tile, the labels' and output's blocks (two buffers
        # each) and 3 scratch columns, lane-padded: 31 MiB at 13p's 1024x768, where the compiler's own
        # scoped VMEM was 29.6 MiB (`maxkernel analyze`)
        lanes = 2 * 2 + 3
        return int(2 * (item_h * bt * h + item_w * h * bv) + 4 * bt * bv + lanes * bt * 128 * 4)

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        """Roofline of v6e-like rates plus a per-step overhead: it only orders proposals."""
        bt, bv = blocks(c)
        steps = -(-b // bt) * -(-v // bv)
        flops_us = 2 * b * h * v * factor / 918e12 * 1e6
        hbm_us = (item_h * b * h + -(-b // bt) * item_w * h * v) / 1.6e12 * 1e6
        return max(flops_us, hbm_us) + 0.35 * steps + (1e6 if vmem(c, d) > 48 * MiB else 0.0)

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        out = (
            []
            if c["block_t"] in TOKEN_BLOCKS
            else [f"block_t={c['block_t']} is not one of {list(TOKEN_BLOCKS)}"]
        )
        if c["block_v"] not in VOCAB_BLOCKS:
            out.append(f"block_v={c['block_v']} is not one of {list(VOCAB_BLOCKS)}")
        return out

    configs = [{"block_t": t, "block_v": w} for t in TOKEN_BLOCKS for w in VOCAB_BLOCKS]
    fitting = [c for c in configs if vmem(c, {}) <= _FIRST_VMEM] or configs[:1]
    initial = min(fitting, key=lambda c: (cost(c, {}), -c["block_t"]))
    value = (
        "the log-sum-exp minus the logit at its label"
        if found["sign"] < 0
        else ("the logit at its label minus the log-sum-exp")
    )
    reduce_note = {
        "none": "The per-token values are the output.",
        "mean": "Their mean over the tokens (an f32 sum of B values) is taken outside the kernel.",
        "sum": "Their sum over the tokens (f32, B values) is taken outside the kernel.",
    }[found["reduce"]]
    fixed = {
        "args": ", ".join(names),
        "hidden": found["hidden"],
        "weight": found["weight"],
        "labels": found["labels"],
        "weight_vh": str(found["weight_vh"]),
        "sign": str(found["sign"]),
        "mxu_dot": mxu_dot_source(kind).rstrip(),
        "dot_note": mxu_dot_note(kind),
        "logit_dtype": found["logit_dtype"],
        "value_note": value,
        "reduce_note": reduce_note,
        "reduce_lines": _reduce_lines(found),
        "target": f"{sym.target}: B={b}, H={h}, V={v}",
        **_scale_parts(program, found["scale"]),
    }
    return Template(
        name="cross_entropy",
        operators=("program",),
        source=SOURCE,
        tunables={"block_t": TOKEN_BLOCKS, "block_v": VOCAB_BLOCKS},
        dims_of=lambda sizes: {"B": b, "H": h, "V": v},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=initial,
        fixed=lambda op: fixed,
        constraints=("block_t, block_v from their lists (clamped to B and V; a vocab tail is masked)",),
        grid_axes=lambda c: ["tokens", "vocab"],
        semantics=lambda c: ["parallel", "arbitrary"],
    )
