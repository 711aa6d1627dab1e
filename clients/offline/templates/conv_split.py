"""A convolution followed by more than an elementwise epilogue (a norm, a pooling mean, a logsumexp):
two Pallas kernels in one module.

The convolution's kernel (templates/window.py, unchanged) takes the conv and the elementwise ops right
after it, and writes their last value to HBM in the reference's dtype at that point; the rest of the
program is traced as its own program (clients/offline/subprogram.py) and written by whichever template
serves it (model.py's `program_template`: the fused program template for a norm). Reductions over a
conv's output need the whole output, which the conv's row blocks never hold: the HBM round trip is
what lets each kernel keep its own grid. Both kernels read every size from their inputs at trace time,
so the tail's mean divisor is its input's H' * W', not the conv's literal (H - 2) * (W - 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from string import Template as _StrTemplate
from typing import Any

from maxkernel.clients.offline.subprogram import subprogram, with_unit_axes
from maxkernel.clients.offline.templates.base import Template
from maxkernel.clients.offline.templates.op_families import CONV, LAYOUT, core_of
from maxkernel.clients.offline.templates.row_blocks import itemsize
from maxkernel.clients.offline.templates.staging import stage as _stage
from maxkernel.clients.offline.templates.window import build as build_window
from maxkernel.tpu_tools.problem.emit import ELEMENTWISE, Program, operand

HEADER = '''"""Convolution, then the rest of the program (offline template `conv_split`), written from the
reference's traced program.

Two kernels: the convolution's (its elementwise epilogue fused) writes ${cut} ${cut_shape} ${cut_dtype} at
the target to HBM; the ${tail} kernel reads it back for what needs the whole output (${tail_ops}).
Shape-generic: each kernel reads its shapes from its inputs when traced; block sizes were chosen for
the target size (${target}).
"""

${imports}

${config_marker}${config_json}
'''

GLUE = '''

def workload(${args}):
    """The reference's signature: the convolution's kernel, then the ${tail} kernel on its output."""
    ${cut} = conv_workload(${head_args})  # ${cut_shape} at the target: to HBM
${prep}    ${ret}
'''


def _absorbable(e: Mapping[str, Any], out_shape: list[int]) -> bool:
    return e["primitive"] in ELEMENTWISE and e["out_specs"][0]["shape"] == out_shape


@dataclass(frozen=True)
class Split:
    """A conv program cut in two: the conv with its elementwise epilogue up to `cut`, and the rest."""

    head: dict[str, Any]  # the conv's program: its operands and channel vectors in, `cut` out
    tail: dict[str, Any]  # the rest: `cut`, the inputs it reads, then the `prep` values in
    cut: str
    unit: list[int]  # tail outputs given two trailing unit axes (subprogram.with_unit_axes)
    prep: list[dict[str, Any]]  # per-channel reshapes of inputs the glue does for the tail


def split(program: Program) -> Split | None:
    """The program cut after its conv's elementwise epilogue; None when it is not one convolution with
    more than an elementwise epilogue."""
    eqns = program["equations"]
    convs = [i for i, e in enumerate(eqns) if e["primitive"] in CONV]
    if len(convs) != 1:
        return None
    c = convs[0]
    conv = eqns[c]
    operands = [operand(a) for a in conv["inputs"]]
    names = program["input_names"]
    if any(o not in names for o in operands):
        return None
    out_shape = list(conv["out_specs"][0]["shape"])
    chan = {
        n
        for n, s in zip(names, program["inputs"], strict=True)
        if n not in operands
        and s["shape"]
        and sorted(s["shape"])[:-1] == [1] * (len(s["shape"]) - 1)
        and max(s["shape"]) == out_shape[1]
    }
    chan_eqns = []
    for i, e in enumerate(eqns):  # per-channel vectors made from per-channel inputs alone (a bias reshape)
        ins = [a for a in e["inputs"] if not a.startswith("lit:")]
        if ins and all(a in chan for a in ins) and e["primitive"] in ELEMENTWISE | LAYOUT:
            chan |= set(e["outputs"])
            chan_eqns.append(i)
    head_vals, absorbed = set(conv["outputs"]), []
    for i in range(c + 1, len(eqns)):
        e = eqns[i]
        if i in chan_eqns:
            continue
        ins = {a for a in e["inputs"] if not a.startswith("lit:")}
        if not (_absorbable(e, out_shape) and ins & head_vals and ins <= head_vals | chan):
            break
        head_vals |= set(e["outputs"])
        absorbed.append(i)
    cuts = []  # (itemsize, -length, end): a cut is valid when its value alone leaves the head
    for k in range(len(absorbed) + 1):
        inside = {c, *absorbed[:k]}
        made = {o for i in inside for o in eqns[i]["outputs"]}
        cut = eqns[max(inside)]["outputs"][0]
        used = {a for i, e in enumerate(eqns) if i not in inside for a in e["inputs"]} | set(
            program["outputs"]
        )
        if made & used == {cut} and cut not in program["outputs"]:
            cuts.append((itemsize(eqns[max(inside)]["out_specs"][0]["dtype"]), -k, k))
    if not cuts:
        return None
    k = min(cuts)[2]
    inside = {c, *absorbed[:k]}
    cut = eqns[max(inside)]["outputs"][0]
    needed = {a for i in inside for a in eqns[i]["inputs"]}
    head_idx = sorted(
        inside | {i for i in chan_eqns if set(eqns[i]["outputs"]) & _closure(eqns, chan_eqns, needed)}
    )
    head_ins = operands + [n for n in names if n in _closure(eqns, chan_eqns, needed) and n not in operands]
    live, tail_idx, prep = set(program["outputs"]), [], []
    for i in range(len(eqns) - 1, -1, -1):  # the tail: what the outputs need, the head's ops left out
        e = eqns[i]
        if i in inside or not set(e["outputs"]) & live:
            continue
        if _channel_reshape(e, names):  # the tail reads it as an input: its blocks follow the channels
            prep.append(e)
            continue
        tail_idx.append(i)
        live |= {a for a in e["inputs"] if not a.startswith("lit:")}
    tail_idx.reverse()
    prep = [e for e in reversed(prep) if e["outputs"][0] in live]
    outs = {e["outputs"][0] for e in prep}
    tail_ins = [cut] + [n for n in names if n in live] + [o for e in eqns for o in e["outputs"] if o in outs]
    head = subprogram(program, head_idx, head_ins, [cut])
    tail, unit = with_unit_axes(subprogram(program, tail_idx, tail_ins, program["outputs"]))
    return Split(head=head, tail=tail, cut=cut, unit=unit, prep=prep)


def _channel_reshape(e: Mapping[str, Any], names: Sequence[str]) -> bool:
    """A reshape of an input vector to one non-unit axis ([C] -> [1, C, 1, 1]): data movement the glue
    does, so the tail gets a per-channel value it can block along the channels (a [C] block must be a
    multiple of 256, a [1, C, 1, 1] one is free)."""
    shape = e["out_specs"][0]["shape"]
    return (
        e["primitive"] == "reshape"
        and e["inputs"][0] in names
        and len(shape) > 1
        and sum(d != 1 for d in shape) == 1
    )


def _closure(eqns: Sequence[Mapping[str, Any]], chan_eqns: Sequence[int], needed: set[str]) -> set[str]:
    """`needed` with the inputs of the channel-vector equations that make any of it, transitively."""
    out = set(needed)
    for i in reversed(chan_eqns):
        if set(eqns[i]["outputs"]) & out:
            out |= {a for a in eqns[i]["inputs"] if not a.startswith("lit:")}
    return out


def _vector_shape(e: Mapping[str, Any]) -> str:
    """A per-channel reshape's shape with its one non-unit axis read from the vector (-1)."""
    return str(tuple(-1 if d != 1 else 1 for d in e["out_specs"][0]["shape"]))


def _returns(n_out: int, unit: Sequence[int], args: str) -> str:
    """The glue's return: the tail's outputs, the trailing unit axes of those in `unit` dropped."""
    if not unit:
        return f"return tail_workload({args})"
    outs = ["out"] if n_out == 1 else [f"out[{k}]" for k in range(n_out)]
    outs = [f"{o}.reshape({o}.shape[:-2])" if k in unit else o for k, o in enumerate(outs)]
    body = outs[0] if n_out == 1 else "(" + ", ".join(outs) + ")"
    return f"out = tail_workload({args})  # trailing unit axes: free blocks along N\n    return {body}"


def compose(conv: Template, tail: Template, found: Split, program: Program, target: str) -> Template:
    """One template of both stages: tunables of both (the tail's renamed `block_tail_*`), each kernel
    checked by its own rules, VMEM the larger stage's, cost their sum."""
    head_prog, tail_prog, cut = found.head, found.tail, found.cut
    tail_keys = {
        k: f"block_tail_{k.removeprefix('block_')}" if k.startswith("block") else f"tail_{k}"
        for k in tail.tunables
    }
    if set(tail_keys.values()) & set(conv.tunables):
        raise ValueError("the two stages' tunables clash")
    conv_body, imports = _stage(conv, "conv", {})
    tail_body, more = _stage(tail, "tail", tail_keys)
    cut_spec = head_prog["variants"].get(target, {}).get("out_specs", head_prog["out_specs"])[0]
    tail_ops = sorted(
        {e["primitive"] for e in tail_prog["equations"] if e["primitive"] not in ELEMENTWISE | LAYOUT}
    )
    fill = {
        "cut": cut,
        "cut_shape": str(list(cut_spec["shape"])),
        "cut_dtype": cut_spec["dtype"],
        "tail": tail.name,
        "tail_ops": ", ".join(tail_ops) or "elementwise",
        "target": target,
        "imports": "\n".join(dict.fromkeys(imports + more)),
        "args": ", ".join(program["input_names"]),
        "head_args": ", ".join(head_prog["input_names"]),
        "tail_args": ", ".join(tail_prog["input_names"]),
        "ret": _returns(len(tail_prog["outputs"]), found.unit, ", ".join(tail_prog["input_names"])),
        "prep": "".join(
            f"    {e['outputs'][0]} = {e['inputs'][0]}.reshape({_vector_shape(e)})  # per channel: data movement\n"
            for e in found.prep
        ),
    }
    source = (
        _StrTemplate(HEADER).safe_substitute(fill)
        + conv_body
        + tail_body
        + _StrTemplate(GLUE).substitute(fill)
    )
    back = {v: k for k, v in tail_keys.items()}

    def parts(c: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return {k: c[k] for k in conv.tunables if k in c}, {back[k]: v for k, v in c.items() if k in back}

    def problems(c: Mapping[str, Any], d: Any) -> list[str]:
        a, b = parts(c)
        return conv.problems(a, d) + [f"tail: {p}" for p in tail.problems(b, d)]

    def vmem(c: Mapping[str, Any], d: Any) -> int:
        a, b = parts(c)
        return max(conv.vmem_bytes(a, d), tail.vmem_bytes(b, d))

    def cost(c: Mapping[str, Any], d: Any) -> float:
        a, b = parts(c)
        return conv.cost_us(a, d) + tail.cost_us(b, d)

    return Template(
        name="conv_split",
        operators=("program",),
        source=source,
        tunables={**conv.tunables, **{tail_keys[k]: v for k, v in tail.tunables.items()}},
        dims_of=conv.dims_of,
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial={**conv.initial, **{tail_keys[k]: v for k, v in tail.initial.items()}},
        fixed=lambda op: {},
        constraints=(*conv.constraints, *(f"tail: {c}" for c in tail.constraints)),
        grid_axes=lambda c: [
            *conv.grid_axes(parts(c)[0]),
            *(f"tail_{a}" for a in tail.grid_axes(parts(c)[1])),
        ],
        semantics=lambda c: [*conv.semantics(parts(c)[0]), *tail.semantics(parts(c)[1])],
    )


def build(program: Program, rest_template, conv_template=None) -> tuple[Template, str, dict[str, int]] | None:
    """(the template, its target size, its dims) of a conv followed by more than elementwise ops; None
    when the program is not that shape; ValueError when a stage has no template. `rest_template` writes
    the program after the convolution (ValueError when none fits); `conv_template(core)` the convolution
    where window.py's blocks do not fit (op_dispatch passes its `build_conv`: no import back up)."""
    found = split(program)
    if found is None:
        return None
    core = core_of(found.head, "conv")
    try:
        conv, target, dims = build_window(core)
    except ValueError:  # no window block fits (a 3-D conv's whole planes): conv_rows' or conv_depth's dot
        if conv_template is None:
            raise
        conv, target, dims = conv_template(core)
    try:
        rest, tail_target, _ = rest_template(found.tail)
    except ValueError as e:
        raise ValueError(f"after its convolution: {e}") from None
    if tail_target != target:
        raise ValueError(f"its stages target different sizes ({target}, {tail_target})")
    return compose(conv, rest, found, program, target), target, dims
