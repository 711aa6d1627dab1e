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
