"""Collapse an activation's leading axes so the 2-D matmul templates serve [B, S, K] x [K, N] programs.

Users' models keep a batch and a sequence axis on their activations (Flax's `nn.Dense` on [B, S, K],
any `x @ w` on a 3-D x): the dot is [B, S, K] x [K, N], and the matmul templates, written for a 2-D left
operand, left it to the row-tiled fused template (one batch row per step, the weight streamed per step:
a Flax block's down-projection at 0.14x of XLA). Here such a program is rewritten as its 2-D twin, the
leading axes L merged into one row axis M = prod(L): every shape L + [X] becomes [M, X], a bias reshaped
to [1, ..., 1, X] becomes [1, X], a reduction over the last axis gives [M]. The twin's kernel is wrapped by
a `workload` that reshapes the inputs in and the output back (free in XLA: the axes are contiguous).
Only programs whose every equation has that reading are rewritten; anything else is left as it is.
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from maxkernel.tpu_tools.problem.emit import ELEMENTWISE, REDUCE

Program = Mapping[str, Any]
ROW_REDUCE = REDUCE | {"argmax", "argmin"}  # over the last axis: one value per row


class _NotCollapsible(Exception):
    pass


def _col(shape: Sequence[int], lead: Sequence[int]) -> list[int]:
    """`shape` with the leading axes `lead` merged (or a [1, ..., 1, X] broadcast row made [1, X])."""
    r = len(lead) + 1
    shape = list(shape)
    if len(shape) == r and shape[:-1] == list(lead):
        return [math.prod(lead), shape[-1]]
    if len(shape) == r and all(d == 1 for d in shape[:-1]):
        return [1, shape[-1]]
    if len(shape) == r - 1 and shape == list(lead):
        return [math.prod(lead)]  # a row statistic (a reduction over the last axis)
    if len(shape) >= r:
        raise _NotCollapsible(f"shape {shape} is not {list(lead)} + [X]")
    return shape


def _col_input(shape: Sequence[int], lead: Sequence[int]) -> list[int]:
    """An input: only rank len(lead) + 1 is merged (a weight of rank len(lead) stays as it is)."""
    return _col(shape, lead) if len(shape) >= len(lead) + 1 else list(shape)


def _lead_of(program: Program, inputs: list[dict]) -> tuple[int, list[int]] | None:
    """(the row input's index, its leading axes) when the one dot's left operand is an input of rank >= 3."""
    dots = [e for e in program["equations"] if e["primitive"] == "dot_general"]
    if len(dots) != 1 or len(program["outputs"]) != 1:
        return None
    e = dots[0]
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    names = program["input_names"]
    lhs, rhs = e["inputs"]
    if lhs not in names or lb or rb:
        return None
    shape = inputs[names.index(lhs)]["shape"]
    if len(shape) < 3 or tuple(lc) != (len(shape) - 1,):
        return None
    return names.index(lhs), list(shape[:-1])


def _rewrite_eqn(e: dict, lead: list[int], shapes_in: dict[str, list[int]]) -> dict:
    """One equation of the 2-D twin (its params rewritten for the merged axis)."""
    prim, r = e["primitive"], len(lead) + 1
    params = dict(e["params"])
    out_shapes = [s["shape"] for s in e["out_specs"]]
    if prim == "dot_general":
        (_lc, rc), _ = ast.literal_eval(params["dimension_numbers"])
        params["dimension_numbers"] = f"(((1,), ({rc[0]},)), ((), ()))"
    elif prim == "reshape":
        if params.get("dimensions") not in (None, "None"):
            raise _NotCollapsible("reshape with dimensions")
        params["new_sizes"] = str(tuple(_col(out_shapes[0], lead)))
    elif prim == "broadcast_in_dim":
        src = e["inputs"][0]
        src_shape = shapes_in.get(src, [])
        dims = tuple(ast.literal_eval(params["broadcast_dimensions"]))
        if src.startswith("lit:") or not src_shape:
            new_dims: tuple[int, ...] = ()
        elif len(src_shape) == r and dims == tuple(range(r)):
            new_dims = (0, 1)
        elif len(src_shape) == 1 and dims == (r - 1,):
            new_dims = (1,)
        elif len(src_shape) == r - 1 and dims == tuple(range(r - 1)) and src_shape == lead:
            new_dims = (0,)
        else:
            raise _NotCollapsible(f"broadcast_in_dim {src_shape} along {dims}")
        params["shape"] = str(tuple(_col(out_shapes[0], lead)))
        params["broadcast_dimensions"] = str(new_dims)
    elif prim in ROW_REDUCE:
        axes = tuple(ast.literal_eval(params.get("axes", "()")))
        if axes != (r - 1,):
            raise _NotCollapsible(f"{prim} over axes {axes}")
        params["axes"] = "(1,)"
    elif prim not in ELEMENTWISE:
        raise _NotCollapsible(f"{prim} has no 2-D reading here")
    return {
        **e,
        "params": params,
        "out_specs": [{**s, "shape": _col(s["shape"], lead)} for s in e["out_specs"]],
    }


def collapse(program: Program) -> dict[str, Any] | None:
    """The 2-D twin of `program` (its `collapsed` key says which inputs to merge), or None."""
    found = _lead_of(program, program["inputs"])
    if found is None:
        return None
    row_input, lead = found
    if len(program["out_specs"][0]["shape"]) != len(lead) + 1:
        return None  # the output must be lead + [N] to be given its leading axes back
    try:
        twin = copy.deepcopy(dict(program))
        shapes = {n: s["shape"] for n, s in zip(program["input_names"], program["inputs"], strict=True)}
        eqns = []
        for e in program["equations"]:
            eqns.append(_rewrite_eqn(e, lead, shapes))
            for name, spec in zip(e["outputs"], e["out_specs"], strict=True):
                shapes[name] = spec["shape"]
        twin["equations"] = eqns
        twin["inputs"] = [{**s, "shape": _col_input(s["shape"], lead)} for s in program["inputs"]]
        twin["out_specs"] = [{**s, "shape": _col(s["shape"], lead)} for s in program["out_specs"]]
        variants = {}
        for size, v in (program.get("variants") or {}).items():
            if v.get("mismatch"):
                variants[size] = v
                continue
            vfound = _lead_of(program, v["inputs"])
            if vfound is None or vfound[0] != row_input:
                return None
            vlead = vfound[1]
            vshapes = {n: s["shape"] for n, s in zip(program["input_names"], v["inputs"], strict=True)}
            table = v.get("shapes") or {}
            new_v = {**v, "inputs": [{**s, "shape": _col_input(s["shape"], vlead)} for s in v["inputs"]]}
            new_v["out_specs"] = [{**s, "shape": _col(s["shape"], vlead)} for s in v["out_specs"]]
            new_shapes, new_params = {}, {}
            for i, e in enumerate(program["equations"]):
                got = table.get(str(i), table.get(i))
                outs = got if got else [s["shape"] for s in e["out_specs"]]
                vparams = (v.get("params") or {}).get(str(i)) or (v.get("params") or {}).get(i) or {}
                ve = {
                    **e,
                    "params": {**e["params"], **vparams},
                    "out_specs": [{**s, "shape": o} for s, o in zip(e["out_specs"], outs, strict=True)],
                }
                rewritten = _rewrite_eqn(ve, vlead, vshapes)
                for name, o in zip(e["outputs"], outs, strict=True):
                    vshapes[name] = o
                if got:
                    new_shapes[str(i)] = [s["shape"] for s in rewritten["out_specs"]]
                base = eqns[i]["params"]
                changed = {k: v2 for k, v2 in rewritten["params"].items() if base.get(k) != v2}
                if changed:
                    new_params[str(i)] = changed
            new_v["shapes"], new_v["params"] = new_shapes, new_params
            variants[size] = new_v
        twin["variants"] = variants
    except _NotCollapsible:
        return None
    names = program["input_names"]
    twin["collapsed"] = {
        "row_input": names[row_input],
        "inputs": [
            n for n, s in zip(names, program["inputs"], strict=True) if len(s["shape"]) == len(lead) + 1
        ],
    }
    return twin


def wrap(source: str, twin: Mapping[str, Any]) -> str:
    """The twin's kernel module with a `workload` that takes the original shapes."""
    info = twin["collapsed"]
    names = list(twin["input_names"])
    inner = source.replace("\ndef workload(", "\ndef _workload_rows(", 1)
    if inner == source:
        raise ValueError("the kernel source has no workload to wrap")
    args = ", ".join(f"{n}.reshape((-1, {n}.shape[-1]))" if n in info["inputs"] else n for n in names)
    row = info["row_input"]
    return (
        inner.rstrip()
        + "\n\n\ndef workload("
        + ", ".join(names)
        + "):\n"
        + f'    """The kernel above on {row}\'s leading axes merged into rows, the output given them back."""\n'
        + f"    lead = {row}.shape[:-1]\n"
        + f"    out = _workload_rows({args})\n"
        + "    return out.reshape(lead + out.shape[1:])\n"
    )
