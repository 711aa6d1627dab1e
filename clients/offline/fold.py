"""A `cond` whose index is a constant is the branch it picks: the traced program with that branch inlined.

Gemma 2's attention picks its key positions through `lax.cond` on a flag fixed when the model is built,
so the traced region carries a cond whose index is a clamp of literals. No template can re-emit a cond,
but the branch it always takes is ordinary equations. Inlining it keeps the program exact; the
variants' per-size tables (`dims.Symbolic` reads them by equation index) are re-keyed, and the inlined
equations get the sizes of the cond's own outputs at each traced size (a number of the branch that is
one of the output's dims at the base size is that dim at every size). A cond whose index depends on an
input, or whose branch cannot be written that way, is left as it is.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

Program = Mapping[str, Any]
_INT = re.compile(r"(?<![\w.])-?\d+(?![\w.])")
_CONST_INT = re.compile(r"^lit:(?:jnp\.asarray\()?(-?\d+)(?:, jnp\.\w+\))?$")


def _constant(program: Program, name: str, depth: int = 0) -> int | None:
    """The integer value of `name` when literals alone make it (a literal or a clamp/convert of them)."""
    if m := _CONST_INT.match(name):
        return int(m.group(1))
    if depth > 8:
        return None
    for e in program["equations"]:
        if name in e["outputs"]:
            args = [_constant(program, a, depth + 1) for a in e["inputs"]]
            if any(a is None for a in args):
                return None
            if e["primitive"] == "clamp":  # lax.clamp(min, x, max)
                return max(args[0], min(args[1], args[2]))
            if e["primitive"] == "convert_element_type" and "int" in e["out_specs"][0]["dtype"]:
                return args[0]
            return None
    return None


def _scaled(text: str, table: Mapping[int, int]) -> str:
    return _INT.sub(lambda m: str(table.get(int(m.group(0)), int(m.group(0)))), text)


def fold_constant_conds(program: Program) -> dict[str, Any]:
    """`program` with every top-level cond of constant index replaced by its branch (or as it is), and
    the equations left unused by that (the index's own clamp) dropped."""
    out, folded = dict(program), False
    while (one := _fold_one(out)) is not None:
        out, folded = one, True
    return _dead_dropped(out) if folded else out


def _dead_dropped(program: Program) -> dict[str, Any]:
    eqns = program["equations"]
    live = set(program["outputs"])
    keep = [False] * len(eqns)
    for i in range(len(eqns) - 1, -1, -1):
        if live & set(eqns[i]["outputs"]):
            keep[i] = True
            live |= {a for a in eqns[i]["inputs"] if not a.startswith("lit:")}
    if all(keep):
        return dict(program)
    new_index, n = {}, 0
    for i, k in enumerate(keep):
        if k:
            new_index[i], n = n, n + 1
    variants = {}
    for size, v in (program.get("variants") or {}).items():
        if v.get("mismatch"):
            variants[size] = v
            continue
        variants[size] = {
            **v,
            **{
                part: {
                    str(new_index[int(k)]): val
                    for k, val in (v.get(part) or {}).items()
                    if int(k) in new_index
                }
                for part in ("params", "literals", "shapes")
            },
        }
    new = [e for e, k in zip(eqns, keep, strict=True) if k]
    return {**program, "equations": new, "census": _census(new), "variants": variants}


def _census(eqns: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in eqns:
        out[x["primitive"]] = out.get(x["primitive"], 0) + 1
    return out


def _fold_one(program: Program) -> dict[str, Any] | None:
    eqns = program["equations"]
    for i, e in enumerate(eqns):
        if e["primitive"] != "cond" or not e.get("subprograms"):
            continue
        index = _constant(program, e["inputs"][0])
        if index is None:
            continue
        subs = e["subprograms"]
        branch = subs[max(0, min(index, len(subs) - 1))]
        inlined = _inline(e, branch)
        if inlined is None:
            continue
        variants = _rekeyed(program, i, e, inlined)
        if variants is None:
            continue
        new = [*eqns[:i], *inlined, *eqns[i + 1 :]]
        return {**program, "equations": new, "census": _census(new), "variants": variants}
    return None


def _inline(e: Mapping[str, Any], branch: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The branch's equations with its inputs named as the cond's operands and its outputs as the cond's."""
    rename = dict(zip(branch["inputs"], e["inputs"][1:], strict=False))
    outs = dict(zip(branch["outputs"], e["outputs"], strict=True))
    body = branch["equations"]
    produced = {o for x in body for o in x["outputs"]}
    if any(o not in produced for o in branch["outputs"]) or len(set(branch["outputs"])) != len(outs):
        return None  # an output passed straight through or a literal: nothing to rename
    if any(x["primitive"] == "cond" or x.get("subprograms") for x in body):
        return None
    return [
        {
            **x,
            "inputs": [rename.get(a, outs.get(a, a)) for a in x["inputs"]],
            "outputs": [outs.get(o, o) for o in x["outputs"]],
        }
        for x in body
    ]


def _rekeyed(
    program: Program, i: int, e: Mapping[str, Any], inlined: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """Each variant's tables keyed by the new equation indices; the inlined equations' entries written
    by mapping the base size's dims of the cond's outputs to that size's."""
    shift = len(inlined) - 1
    base_dims = [d for s in e["out_specs"] for d in s["shape"]]
    out: dict[str, Any] = {}
    for size, v in (program.get("variants") or {}).items():
        if v.get("mismatch"):
            out[size] = v
            continue
        shapes = (v.get("shapes") or {}).get(str(i)) or [s["shape"] for s in e["out_specs"]]
        table: dict[int, int] = {}
        for a, b in zip(base_dims, [d for s in shapes for d in s], strict=True):
            if table.get(a, b) != b:
                return None  # one dim at the base size is two at this one: no single mapping
            if a != b:
                table[a] = b
        new_v = {**v}
        for part in ("params", "literals", "shapes"):
            old = v.get(part) or {}
            moved = {}
            for k, val in old.items():
                j = int(k)
                if j == i:
                    continue
                moved[str(j + shift if j > i else j)] = val
            for n, x in enumerate(inlined):
                entry = _scaled_entry(x, part, table)
                if entry is not None:
                    moved[str(i + n)] = entry
            new_v[part] = moved
        out[size] = new_v
    return out


def _scaled_entry(x: Mapping[str, Any], part: str, table: Mapping[int, int]) -> Any:
    if not table:
        return None
    if part == "shapes":
        shapes = [[table.get(d, d) for d in s["shape"]] for s in x["out_specs"]]
        return shapes if shapes != [s["shape"] for s in x["out_specs"]] else None
    if part == "params":
        got = {k: _scaled(t, table) for k, t in x["params"].items() if _is_shape_param(t)}
        got = {k: t for k, t in got.items() if t != x["params"][k]}
        return got or None
    got = {str(j): _scaled(a, table) for j, a in enumerate(x["inputs"]) if _CONST_INT.match(a)}
    got = {k: t for k, t in got.items() if t != x["inputs"][int(k)]}
    return got or None


def _is_shape_param(text: str) -> bool:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return isinstance(value, tuple) and all(isinstance(d, int) for d in value)
