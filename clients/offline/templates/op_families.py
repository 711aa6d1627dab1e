"""The op families the fused templates cannot lower to Mosaic: pooling, convolution, scans, arg-reductions.

A program belongs to one of these families when it is one core op (a `reduce_window_*`, a
`conv_general_dilated`, a `cum*`, or `argmax`/`argmin` with the `reduce_max`/`reduce_min` beside them)
on one input, followed by an elementwise epilogue on its result (an average's divide, an exclusive
scan's subtract). `match` names the family's builder; each builder (templates/scan_reduce.py,
templates/window.py) writes its own layout and kernel, and raises ValueError with the reason when this
program is outside what it does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maxkernel.clients.offline.dims import Symbolic, program_at
from maxkernel.tpu_tools.problem.emit import ELEMENTWISE, Program, body_lines, operand

POOL = {"reduce_window_max", "reduce_window_min", "reduce_window_sum"}
CONV = {"conv_general_dilated"}
SCAN = {"cumsum", "cumprod", "cummax", "cummin"}
ARG = {"argmax", "argmin"}
ARG_VALUES = {"argmax": "reduce_max", "argmin": "reduce_min"}
LAYOUT = {"reshape", "broadcast_in_dim", "squeeze", "expand_dims"}


@dataclass
class Core:
    """The family's op in one program: where it is, what it reads, and the elementwise ops after it."""

    family: str  # pool | conv | scan | arg
    program: dict[str, Any]  # traced at the target size
    target: str
    cores: list[dict[str, Any]]  # the core equation(s): one, or an arg-reduction with its values
    epilogue: list[dict[str, Any]]  # elementwise equations after the core, in order
    channels: list[str]  # inputs that are per-channel vectors of the result (a bias)
    channel_layout: set[str]  # values reshaped/broadcast from channel vectors alone: the kernel's [1, lanes]


def family_of(program: Program) -> str | None:
    """pool | conv | scan | arg when the program's one heavy op is of that family, else None."""
    census = set(program.get("census", {}))
    for family, prims in (("pool", POOL), ("conv", CONV), ("scan", SCAN), ("arg", ARG)):
        if census & prims:
            return family
    return None


def core_of(program: Program, family: str) -> Core:
    """The core op and its epilogue at the target size; ValueError when the program is more than that."""
    sym = Symbolic(program)
    if sym.mismatch:
        raise ValueError(
            f"its traced program changes structure with size ({'; '.join(sym.mismatch.values())})"
        )
    at = program_at(program, sym.target)
    prims = {"pool": POOL, "conv": CONV, "scan": SCAN, "arg": ARG | set(ARG_VALUES.values())}[family]
    eqns = at["equations"]
    cores = [e for e in eqns if e["primitive"] in prims]
    rest = [e for e in eqns if e["primitive"] not in prims]
    if family == "arg":
        ins = {e["inputs"][0] for e in cores}
        axes = {e["params"]["axes"] for e in cores}
        if len(ins) != 1 or len(axes) != 1 or not any(e["primitive"] in ARG for e in cores):
            raise ValueError("its arg-reductions read different operands or axes")
    elif len(cores) != 1:
        raise ValueError(f"it has {len(cores)} {family} ops; the {family} template writes one")
    first = eqns.index(cores[0])
    if any(eqns.index(e) > first for e in cores) and family != "arg":
        raise ValueError("ops sit between its core ops")
    src = operand(cores[0]["inputs"][0])
    if src not in at["input_names"]:
        raise ValueError(f"its {cores[0]['primitive']} reads a computed value, not an input")
    if family == "conv" and operand(cores[0]["inputs"][1]) not in at["input_names"]:
        raise ValueError("its convolution's weights are computed, not an input")
    out_shape = list(cores[0]["out_specs"][0]["shape"])
    weights = {operand(a) for a in cores[0]["inputs"][1:]}
    channels = _channel_inputs(at, family, src, weights, out_shape)
    chan_vals = set(channels)  # values made from channel inputs alone: [1, lanes] tiles in the kernel
    core_outs = {o for e in cores for o in e["outputs"]}
    allowed = {src} | core_outs
    for e in rest:
        ins = [a for a in e["inputs"] if not a.startswith("lit:")]
        if ins and all(a in chan_vals for a in ins) and e["primitive"] in ELEMENTWISE | LAYOUT:
            chan_vals |= set(e["outputs"])  # a per-channel vector (a bias reshaped to [1, C, 1, 1])
            continue
        if eqns.index(e) < first:
            raise ValueError("ops run before its core op (a prologue)")
        if e["primitive"] not in ELEMENTWISE:
            raise ValueError(f"its epilogue has {e['primitive']}, not elementwise")
        for a in ins:
            if a in chan_vals:
                shape = _shape_of(at, a)
                if len(shape) != len(out_shape) or any(d != 1 for i, d in enumerate(shape) if i != 1):
                    raise ValueError(f"its epilogue broadcasts {a} {shape} over more than the channel axis")
            elif a not in allowed:
                raise ValueError(f"its epilogue reads {a}, neither the core's result nor its input")
        allowed |= set(e["outputs"])
    if src in {a for e in rest for a in e["inputs"]}:
        if out_shape != at["inputs"][at["input_names"].index(src)]["shape"]:
            raise ValueError("its epilogue reads the input at a shape other than the result's")
    for size in sym.sizes:  # the kernel writes the op's parameters as constants: they must not follow size
        other = program_at(program, size)
        for e in cores:
            o = other["equations"][eqns.index(e)]
            if _sized(o, other) != _sized(e, at):
                raise ValueError(f"its {e['primitive']} parameters change with size ({size})")
    return Core(family, at, sym.target, cores, rest, channels, chan_vals - set(channels))


def _sized(e: Mapping[str, Any], program: Program) -> dict[str, str]:
    """The op's parameters, a depthwise convolution's group count (= the input's channels) left out."""
    params = dict(e["params"])
    if e["primitive"] in CONV:
        lhs = _shape_of(program, operand(e["inputs"][0]))
        if len(lhs) > 1 and params.get("feature_group_count") == str(lhs[1]):
            params["feature_group_count"] = "depthwise"
    return params


def _shape_of(program: Program, name: str) -> list[int]:
    if name in program["input_names"]:
        return list(program["inputs"][program["input_names"].index(name)]["shape"])
    for e in program["equations"]:
        if name in e["outputs"]:
            return list(e["out_specs"][e["outputs"].index(name)]["shape"])
    return []


def _channel_inputs(at: Program, family: str, src: str, weights: set[str], out_shape: list[int]) -> list[str]:
    """The inputs besides the core's operands: per-channel vectors ([C], [C, 1, 1], ...) of a pool or a
    convolution's output; anything else is refused."""
    out = []
    for name, spec in zip(at["input_names"], at["inputs"], strict=True):
        if name == src or name in weights:
            continue
        shape = spec["shape"]
        if (
            family not in ("pool", "conv")
            or len(out_shape) < 2
            or sorted(shape)[:-1] != [1] * (len(shape) - 1)
            or (shape and max(shape) != out_shape[1])
        ):
            raise ValueError(f"it reads input {name} {shape}, not a per-channel vector of its result")
        out.append(name)
    return out


def narrow_vpu(program: Mapping[str, Any]) -> bool:
    """True where the program's target has no bf16 vector math (the prompt's chip facts said so: model.py
    sets `bf16_vpu`): its epilogues are written in f32 (in_f32)."""
    return program.get("bf16_vpu") is False


def in_f32(eqns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The equations (a kernel's epilogue) with every bf16 value computed in f32: results, bf16 literals and
    converts to bf16 become f32 (on a chip without bf16 ALUs each bf16 op is widened and rounded: 1.9-2.4x
    the bundles, chips.py). Only rounding steps go, so the values sit nearer the f32 oracle (the judge still
    checks them against it)."""
    out = []
    for e in eqns:
        e = dict(e)
        e["inputs"] = [
            a.replace("jnp.bfloat16)", "jnp.float32)") if a.startswith("lit:") else a for a in e["inputs"]
        ]
        e["out_specs"] = [
            {**sp, "dtype": "float32"} if sp.get("dtype") == "bfloat16" else sp for sp in e["out_specs"]
        ]
        if e["primitive"] == "convert_element_type" and e["params"].get("new_dtype") == "jnp.bfloat16":
            e["params"] = {**e["params"], "new_dtype": "jnp.float32"}
        out.append(e)
    return out


# ops whose meaning changes when a bf16 value is computed in f32, or that hold their own equations
_NOT_WIDENED = {"dot_general", "conv_general_dilated", "bitcast_convert_type", "reduce_precision"}


def f32_program(program: Mapping[str, Any]) -> dict[str, Any] | None:
    """The program with its body in f32 (in_f32, and every size's literals to match) where its target has
    no bf16 vector math (narrow_vpu) and it computes on bf16 values; None where not (a contraction keeps
    its operands' dtype, a bitcast or control flow is left as traced). Its inputs and outputs keep their
    dtypes: a kernel loads each bf16 input widened once and rounds each output once on store (28k's
    LayerNorm-GELU tail on v5e, LLO: each bf16 op is widened and rounded again, chips.py)."""
    eqns = program["equations"]
    if not narrow_vpu(program) or any(
        e["primitive"] in _NOT_WIDENED or e.get("subprograms") or e["params"].get("dtype") == "jnp.bfloat16"
        for e in eqns
    ):  # a bf16 iota's dtype is a parameter in_f32 does not rewrite: left as traced
        return None
    if not any(sp.get("dtype") == "bfloat16" for e in eqns for sp in e["out_specs"]):
        return None
    variants = {}
    for size, v in (program.get("variants") or {}).items():
        lits = {
            i: {j: t.replace("jnp.bfloat16)", "jnp.float32)") for j, t in row.items()}
            for i, row in (v.get("literals") or {}).items()
        }
        variants[size] = {**v, "literals": lits}
    return {**program, "equations": in_f32(eqns), "variants": variants}


def epilogue_source(
    core: Core, names: Mapping[str, str], indent: str = "    "
) -> tuple[list[str], list[str]]:
    """(lines, result expressions): the epilogue on the kernel's tiles, `names` binding the core's outputs
    (and its input, and its channel vectors) to the tile variables that hold them; a result is the last
    value of each output. A reshape or broadcast of a channel vector is the [1, lanes] tile itself. On a
    chip without bf16 vector math (narrow_vpu) every bound tile is widened to f32 once and the epilogue
    runs in f32 (in_f32); the store rounds once."""
    f32 = narrow_vpu(core.program)
    lines = [indent + bind(k, v, f32) for k, v in names.items()]
    for e in in_f32(core.epilogue) if f32 else core.epilogue:
        if e["primitive"] in LAYOUT and e["outputs"][0] in core.channel_layout:
            lines.append(f"{indent}{e['outputs'][0]} = {operand(e['inputs'][0])}  # [1, lanes]: per channel")
        else:
            lines += [indent + ln for ln in body_lines({"equations": [e]})]
    return lines, [operand(o) for o in core.program["outputs"]]


def bind(name: str, expr: str, f32: bool) -> str:
    """`name = expr`, a tile bound into an epilogue, widened to f32 once where the epilogue runs in f32 (a
    trailing `  # note` of `expr` stays the line's comment)."""
    code, sep, note = expr.partition("  # ")
    return f"{name} = {code}{'.astype(jnp.float32)' if f32 else ''}{sep}{note}"


def accumulated(expr: str, dtype: str, f32: bool, shape: str) -> str:
    """A dot's f32 result bound (by `bind`) as the traced op's `dtype` output: rounded once to it; where the
    epilogue runs in f32 (narrow_vpu) left f32, the rounding dropped as in_f32 drops the epilogue's own (nearer
    the f32 oracle, and on v5e the rounding is 3-4 vector ops an element: 34k's kernel 2691 -> 2479 us)."""
    if f32 and dtype != "float32":
        return f"{expr}  # {shape}: f32, not rounded to {dtype} (the epilogue runs in f32)"
    return f"{expr}.astype(jnp.{dtype})  # {shape}: rounded once"


def check_config(legal: Mapping[str, Sequence[Any]]) -> Callable[[Mapping[str, Any], Any], list[str]]:
    """A `problems` function: a config is legal when every tunable is one of its legal values."""

    def problems(c: Mapping[str, Any], d: Any) -> list[str]:
        return [f"{k}={c[k]} is not one of {list(v)}" for k, v in legal.items() if c.get(k) not in v]

    return problems
