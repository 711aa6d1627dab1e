"""A part of a traced program as a program of its own, with its traces at every size.

A template that writes a program in stages (a convolution kernel, then a kernel for what follows it)
hands each stage's equations to the builder that writes them. The builders read a whole program dict
(`describe_reference`'s form): inputs, outputs, equations, and each variant size's shapes, params and
literals keyed by equation index. `subprogram` cuts that dict down to chosen equations and re-keys the
variants, so every builder sees the stage as if it had been traced alone and writes its sizes from the
stage's own input shapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

Program = Mapping[str, Any]


def _get(table: Mapping[Any, Any] | None, i: int) -> Any:
    table = table or {}
    return table.get(str(i), table.get(i))


def _spec(program: Program, name: str, variant: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec (shape, dtype) of an input or equation output, at the base size or in `variant`."""
    if name in program["input_names"]:
        k = program["input_names"].index(name)
        return dict((variant or program)["inputs"][k])
    for i, e in enumerate(program["equations"]):
        if name in e["outputs"]:
            k = e["outputs"].index(name)
            spec = dict(e["out_specs"][k])
            shapes = _get(variant.get("shapes"), i) if variant else None
            if shapes:
                spec["shape"] = list(shapes[k])
            return spec
    raise KeyError(f"{name} is neither an input nor an equation output")


def subprogram(
    program: Program, indices: Sequence[int], input_names: Sequence[str], outputs: Sequence[str]
) -> dict[str, Any]:
    """The equations at `indices` (in program order) as a program reading `input_names` (inputs of the
    program or values its other equations compute) and returning `outputs`."""
    eqns = [program["equations"][i] for i in indices]
    variants = {}
    for size, v in (program.get("variants") or {}).items():
        if v.get("mismatch"):
            variants[size] = dict(v)
            continue
        variants[size] = {
            "inputs": [_spec(program, n, v) for n in input_names],
            "out_specs": [_spec(program, n, v) for n in outputs],
            "mismatch": None,
            **{
                part: {
                    str(j): got for j, i in enumerate(indices) if (got := _get(v.get(part), i)) is not None
                }
                for part in ("params", "literals", "shapes")
            },
        }
    return {
        **{k: v for k, v in program.items() if k not in ("equations", "variants")},
        "inputs": [_spec(program, n, None) for n in input_names],
        "input_names": list(input_names),
        "outputs": list(outputs),
        "out_specs": [_spec(program, n, None) for n in outputs],
        "equations": eqns,
        "census": dict(Counter(e["primitive"] for e in eqns)),
        "variants": variants,
    }


def with_unit_axes(program: Program) -> tuple[dict[str, Any], list[int]]:
    """(the program, which outputs changed): each output of rank 1 or 2 reshaped to two more trailing
    unit axes. A block of a [N] or [N, C] output must be a multiple of (8, 128) along its last two axes;
    of [N, C, 1, 1], any block along N and C: a row of a per-sample mean is one grid step, not 128."""
    changed = [k for k, s in enumerate(program["out_specs"]) if 1 <= len(s["shape"]) <= 2]
    if not changed:
        return dict(program), []
    eqns, outputs, specs = list(program["equations"]), list(program["outputs"]), list(program["out_specs"])
    variants = {s: dict(v) for s, v in (program.get("variants") or {}).items()}
    taken = {o for e in eqns for o in e["outputs"]} | set(program["input_names"])
    for k in changed:
        new = next(f"{outputs[k]}_{i}" for i in range(len(taken) + 1) if f"{outputs[k]}_{i}" not in taken)
        taken.add(new)
        shape = [*specs[k]["shape"], 1, 1]
        eqns.append(
            {
                "primitive": "reshape",
                "inputs": [outputs[k]],
                "outputs": [new],
                "out_specs": [{**specs[k], "shape": shape}],
                "params": {"new_sizes": str(tuple(shape)), "dimensions": "None"},
                "scope": "",
                "source": "",
            }
        )
        j = str(len(eqns) - 1)
        for v in variants.values():
            if v.get("mismatch"):
                continue
            at = [*v["out_specs"][k]["shape"], 1, 1]
            v["params"] = {**(v.get("params") or {}), j: {"new_sizes": str(tuple(at))}}
            v["shapes"] = {**(v.get("shapes") or {}), j: [at]}
            v["out_specs"] = [
                *v["out_specs"][:k],
                {**v["out_specs"][k], "shape": at},
                *v["out_specs"][k + 1 :],
            ]
        outputs[k] = new
        specs[k] = {**specs[k], "shape": shape}
    census = dict(Counter(e["primitive"] for e in eqns))
    out = {**program, "equations": eqns, "outputs": outputs, "out_specs": specs, "census": census}
    return {**out, "variants": variants}, changed
