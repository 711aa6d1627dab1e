"""An input scattered into zeros at a strided lattice, as one `lax.pad` with interior padding.

A transposed convolution written the way PyTorch ports write it (28k) builds its dilated input as
`zeros(...).at[:, :, ::s, ::s, ::s].set(x)`: a broadcast of zeros, index arithmetic over iotas and a
scatter. XLA on a TPU writes that as the zeros, the scatter and a relayout of the result (6.2 ms of the
28k program's 9.3 ms of glue on v5e, LLO); `lax.pad` with interior padding is the same value in one op.
The indices are evaluated, not pattern-matched: at every traced size they must be the lattice
`c + s * i` along each scattered axis, every update in bounds, the same padding at every size. The judge
still checks the kernel against the reference as written.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from maxkernel.clients.offline.dims import program_at
from maxkernel.clients.offline.stages import producers, upstream
from maxkernel.clients.offline.subprogram import subprogram
from maxkernel.tpu_tools.problem.emit import Program, body_lines, operand

# the index arithmetic evaluated at one size: at most 64 MiB of int32 (28k at full: about 10^5 elements)
_MAX_ELEMENTS = 1 << 24
_FIELD = re.compile(r"(\w+)=(\([^)]*\))")


def _dimension_numbers(text: str) -> dict[str, tuple[int, ...]] | None:
    fields = {k: ast.literal_eval(v) for k, v in _FIELD.findall(text)}
    need = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims")
    return fields if all(k in fields for k in need) else None


def _is_zero(literal: str) -> bool:
    m = re.fullmatch(r"lit:jnp\.asarray\(([^,]+), jnp\.\w+\)", literal)
    try:
        return m is not None and float(ast.literal_eval(m.group(1))) == 0.0
    except (ValueError, SyntaxError):
        return False


def _zero_constant(program: Mapping[str, Any], name: str) -> bool:
    value = _evaluate(program, name)
    return value is not None and value.shape == () and float(value) == 0.0


def _evaluate(program: Mapping[str, Any], name: str) -> np.ndarray | None:
    """The value `name` computes, when it reads no input (iotas and literals only); None otherwise."""
    eqns = program["equations"]
    made_by = producers(program)
    need = upstream(program, [name], made_by)
    if name not in made_by or any(
        a not in made_by for i in need for a in eqns[i]["inputs"] if not a.startswith("lit:")
    ):
        return None  # it reads an input of the program: not a constant
    if any(eqns[i].get("subprograms") for i in need):
        return None
    if sum(math.prod(sp["shape"]) for i in need for sp in eqns[i]["out_specs"]) > _MAX_ELEMENTS:
        return None  # evaluated on the host at the traced size: bounded, whatever the reference holds
    import jax.numpy as jnp
    from jax import lax

    scope: dict[str, Any] = {"jnp": jnp, "lax": lax}
    exec("\n".join(body_lines({"equations": [eqns[i] for i in sorted(need)]}, mosaic=False)), scope)  # noqa: S102 - lines written from the traced program's own equations
    return np.asarray(scope[operand(name)])


def _padding(program: Mapping[str, Any], k: int) -> tuple[tuple[int, int, int], ...] | None:
    """Equation k (a scatter into zeros) as a padding config of its updates, at this trace's sizes."""
    e = program["equations"][k]
    operand_name, indices_name, updates_name = e["inputs"]
    dn = _dimension_numbers(e["params"].get("dimension_numbers", ""))
    if dn is None or dn.get("operand_batching_dims") or dn.get("scatter_indices_batching_dims"):
        return None
    shapes = {
        o: sp["shape"]
        for q in program["equations"]
        for o, sp in zip(q["outputs"], q["out_specs"], strict=True)
    }
    shapes |= {n: s["shape"] for n, s in zip(program["input_names"], program["inputs"], strict=True)}
    out, upd = shapes[operand_name], shapes.get(updates_name)
    if upd is None:
        return None
    w, k_dims = len(dn["update_window_dims"]), len(dn["scatter_dims_to_operand_dims"])
    scattered = tuple(range(w, w + k_dims))
    if (
        dn["update_window_dims"] != tuple(range(w))
        or dn["inserted_window_dims"] != scattered
        or dn["scatter_dims_to_operand_dims"] != scattered
        or len(out) != w + k_dims
        or len(upd) != w + k_dims
        or list(out[:w]) != list(upd[:w])
    ):
        return None  # window axes first, every scattered axis one index component: the layout pad keeps
    idx = _evaluate(program, indices_name)
    if idx is None or idx.shape != (*upd[w:], k_dims):
        return None
    config = [(0, 0, 0)] * w
    for j in range(k_dims):
        n, c = upd[w + j], int(idx[(0,) * k_dims + (j,)])
        s = int(idx[(0,) * j + (1,) + (0,) * (k_dims - j - 1) + (j,)]) - c if n > 1 else 1
        grid = np.arange(n).reshape([-1 if a == j else 1 for a in range(k_dims)])
        if s < 1 or not np.array_equal(idx[..., j], np.broadcast_to(c + s * grid, idx.shape[:-1])):
            return None
        hi = out[w + j] - (c + s * (n - 1) + 1)
        if c < 0 or hi < 0:
            return None  # an update out of bounds (dropped or clipped): not a pad
        config.append((c, hi, s - 1))
    return tuple(config)


def _varies(program: Program, k: int) -> bool:
    """Equation k's parameters change with size (some traced size states its own)."""
    return any(
        k in (v.get("params") or {}) or str(k) in (v.get("params") or {})
        for v in (program.get("variants") or {}).values()
    )


def _merge_edge_pad(program: Program, eqns: list[dict[str, Any]], k: int, config: tuple) -> None:
    """When the pad's only reader is another pad by zeros with no interior padding (the conv's edges),
    the two as one: pad applies interior padding before the edges, so the edges add (XLA writes the
    dilated input once, not twice: 28k on v5e, LLO, 2988 + 1714 us as two)."""
    out = eqns[k]["outputs"][0]
    readers = [q for q, e in enumerate(eqns) if out in e["inputs"]]
    if out in program["outputs"] or len(readers) != 1 or eqns[readers[0]]["primitive"] != "pad":
        return
    q = readers[0]
    if _varies(program, q):
        return  # its edges change with size
    value = eqns[q]["inputs"][1]
    if not (_is_zero(value) if value.startswith("lit:") else _zero_constant(program, value)):
        return
    edges = ast.literal_eval(eqns[q]["params"]["padding_config"])
    if len(edges) != len(config) or any(i != 0 for _, _, i in edges):
        return
    merged = tuple((a + lo, b + hi, i) for (a, b, i), (lo, hi, _) in zip(config, edges, strict=True))
    eqns[q] = {
        **eqns[q],
        "inputs": [eqns[k]["inputs"][0], eqns[k]["inputs"][1]],
        "params": {"padding_config": str(merged)},
    }


def as_interior_pad(program: Program) -> dict[str, Any] | None:
    """The program with each scatter of a value into zeros at a strided lattice written as `lax.pad` with
    interior padding, the index arithmetic and zeros it no longer reads dropped; None when it has none."""
    eqns = [dict(e) for e in program["equations"]]
    made_by = producers(program)
    sizes = [program.get("size"), *(program.get("variants") or {})]
    changed = False
    for k, e in enumerate(eqns):
        if e["primitive"] != "scatter" or len(e["inputs"]) != 3:
            continue
        z = made_by.get(e["inputs"][0])
        if z is None or eqns[z]["primitive"] != "broadcast_in_dim" or not _is_zero(eqns[z]["inputs"][0]):
            continue
        if _varies(program, k):
            continue  # the scatter's own parameters change with size
        configs = {_padding(program_at(program, s), k) if s else None for s in sizes}
        if len(configs) != 1 or None in configs:
            continue
        (config,) = configs
        eqns[k] = {
            **e,
            "primitive": "pad",
            "inputs": [e["inputs"][2], eqns[z]["inputs"][0]],
            "params": {"padding_config": str(config)},
        }
        _merge_edge_pad(program, eqns, k, config)
        changed = True
    if not changed:
        return None
    rewritten = {**program, "equations": eqns}
    live = sorted(upstream(rewritten, program["outputs"], producers(rewritten)))  # the zeros and indices drop
    return subprogram(rewritten, live, program["input_names"], program["outputs"])
