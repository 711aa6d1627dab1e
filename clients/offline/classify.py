"""The class of a traced reference program: which offline template family serves it.

- `attention`: a dot_general whose result goes through a softmax (reduce_max, exp, reduce_sum) into a
  second dot_general;
- `matmul`: any other dot_general (the ops after it are its epilogue);
- `fused`: a convolution, or reductions that are not over the last axis only;
- `rowwise`: reductions over the last axis with elementwise ops;
- `elementwise`: elementwise ops only (plus broadcasts and reshapes);
- `recurrence`: one `scan` whose body is elementwise with a carry (templates/recurrence.py).
`unsupported` lists the primitives no template can re-emit; a program with any is served by none.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from maxkernel.tpu_tools.problem.emit import (
    ELEMENTWISE,
    REDUCE,
    Program,
    top_k_in_kernel,
    unsupported_ops,
    var_dtypes,
)

SOFTMAX = ("reduce_max", "exp", "reduce_sum")
SHAPE_OPS = {"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "iota", "slice",
             "concatenate", "pad", "rev"}  # fmt: skip


@dataclass
class Classification:
    kind: str  # attention | matmul | rowwise | elementwise | fused | recurrence | none
    unsupported: list[str]
    why: str


def _downstream(program: Program, start: int) -> list[int]:
    """Indices of the equations that (transitively) use the outputs of equation `start`."""
    eqns = program["equations"]
    live = set(eqns[start]["outputs"])
    hits = []
    for i in range(start + 1, len(eqns)):
        if live & set(eqns[i]["inputs"]):
            live |= set(eqns[i]["outputs"])
            hits.append(i)
    return hits


def _attention(program: Program) -> bool:
    eqns = program["equations"]
    for i, e in enumerate(eqns):
        if e["primitive"] != "dot_general":
            continue
        seen: set[str] = set()
        for j in _downstream(program, i):
            prim = eqns[j]["primitive"]
            if prim == "dot_general":
                if all(s in seen for s in SOFTMAX):
                    return True
                break
            seen.add(prim)
    return False


def _recurrence(program: Program) -> bool:
    """One scan over time whose body is elementwise with a carry; the template checks the rest."""
    scans = [e for e in program["equations"] if e["primitive"] == "scan"]
    if len(scans) != 1 or not int(scans[0]["params"].get("num_carry", "0")):
        return False
    return all(e["primitive"] in ELEMENTWISE for s in scans[0]["subprograms"] for e in s["equations"])


def classify(program: Program) -> Classification:
    bad = unsupported_ops(program)
    dtypes = var_dtypes(program)
    if any(
        e["primitive"] == "top_k" and not top_k_in_kernel(e, dtypes.get(e["inputs"][0], ""))
        for e in program["equations"]
    ):  # no max-and-mask rounds for it (k too large, an int row, not the last axis): no body writes it
        bad = sorted({*bad, "top_k"})
    if bad == ["scan"] and _recurrence(program):
        return Classification("recurrence", [], "a scan over time with an elementwise body and a carry")
    if bad:
        return Classification("none", bad, "primitives without a template: " + ", ".join(bad))
    census = program.get("census", {})
    if "dot_general" in census or "ragged_dot_general" in census:
        if _attention(program):
            return Classification("attention", [], "dot_general -> softmax -> dot_general")
        dots = census.get("dot_general", 0) + census.get("ragged_dot_general", 0)
        return Classification("matmul", [], f"{dots} dot_general with its epilogue")
    if "conv_general_dilated" in census:
        return Classification("fused", [], "a convolution with its epilogue")
    reductions = [e for e in program["equations"] if e["primitive"] in REDUCE]
    other = sorted({p for p in census if p not in ELEMENTWISE and p not in SHAPE_OPS and p not in REDUCE})
    if other:
        return Classification(
            "fused", [], f"ops that are neither elementwise nor reductions: {', '.join(other)}"
        )
    if not reductions:
        return Classification("elementwise", [], "elementwise ops only")
    for e in reductions:
        rank = len(program_shape(program, e["inputs"][0]))
        axes = ast.literal_eval(e["params"]["axes"])
        if tuple(axes) != (rank - 1,):
            return Classification("fused", [], f"a {e['primitive']} over axes {tuple(axes)}, not the last")
    return Classification("rowwise", [], "reductions over the last axis with elementwise ops")


def program_shape(program: Program, name: str) -> list[int]:
    """The shape of variable `name` (an input or an equation output)."""
    if name in program["input_names"]:
        return program["inputs"][program["input_names"].index(name)]["shape"]
    for e in program["equations"]:
        if name in e["outputs"]:
            return e["out_specs"][e["outputs"].index(name)]["shape"]
    return []
