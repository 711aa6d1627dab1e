"""Blocks along a program's rows, shared by the fused-row and matmul-epilogue templates: Mosaic's alignment
rule for a block's axis, the legal block sizes at the target size, and the program's equations written for
one block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from maxkernel.clients.offline.dims import Symbolic, shape_source
from maxkernel.clients.offline.rows import RowPlan
from maxkernel.tpu_tools.problem.emit import Program, body_lines

SUBLANES = {4: 8, 2: 16, 1: 32}  # sublane multiple of a block's second-to-last dim, by itemsize


def itemsize(dtype: str) -> int:
    import numpy as np

    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return 2 if "16" in dtype else 4


def nbytes(shape: Sequence[int], dtype: str) -> int:
    return math.prod(shape) * itemsize(dtype)


def block_align(rank: int, axis: int, dtype: str) -> int:
    """The multiple a block along `axis` must be (unless it is the whole dim): lanes, sublanes, or free."""
    if rank == 1:  # Mosaic's rank-1 rule: a power of 2 at least 128 lanes x the dtype's packing
        return 128 * max(1, 4 // itemsize(dtype))
    if axis == rank - 1:
        return 128
    if axis == rank - 2:
        return SUBLANES.get(itemsize(dtype), 8)
    return 1


def tiled_axes(plans: Sequence[RowPlan], name: str) -> dict[int, int]:
    """{axis of value `name`: grid axis k} over the tiling plans."""
    return {ax: k for k, p in enumerate(plans) if (ax := p.axes.get(name)) is not None}


def row_body(
    program: Program, plans: Sequence[RowPlan], sym: Symbolic, equations: list[dict] | None = None
) -> str:
    """The program's equations (or the subset `equations`) as indented source: shapes along a tiled axis
    are its block size `b<k>`, every other number that follows the size is written from `sh`."""
    offsets = {program["equations"][i]["outputs"][0]: k for k, p in enumerate(plans) for i in p.offset_iotas}

    def shape_of(e: dict, key: str) -> str:
        elems = sym.shape_elems(e, key)
        for ax, k in tiled_axes(plans, e["outputs"][0]).items():
            elems[ax] = f"b{k}"
        return shape_source(elems)

    def extra(e: dict, expr: str) -> str:
        k = offsets.get(e["outputs"][0])
        if k is not None:
            return f"lax.add({expr}, lax.convert_element_type(r{k}, {e['params']['dtype']}))"
        return expr

    sub = program if equations is None else {**program, "equations": equations}
    return "\n".join(f"    {line}" for line in body_lines(sub, shape_of, extra, sym))


def legal_blocks(program: Program, plans: Sequence[RowPlan], sym: Symbolic) -> list[tuple[int, ...]]:
    """Per grid axis, the block sizes that are legal at the target: multiples of every blocked array's
    alignment along it (a block at or past the dim clamps to the whole dim, which is always legal)."""
    at = sym.at(sym.target)
    layout = program.get("layout") or {}  # folded layout moves (fused.layout_of): the arrays' own axes
    in_perms = {n: tuple(p) for n, p in (layout.get("inputs") or {}).items()}
    out_perms = {int(k): tuple(p) for k, p in (layout.get("outputs") or {}).items()}
    out = []
    for p in plans:
        n = at["out_specs"][0]["shape"][p.out_axis]
        arrays = [
            (s, in_perms[name][a] if name in in_perms else a)
            for name, s, a in zip(program["input_names"], at["inputs"], p.input_axes, strict=True)
            if a is not None
        ]
        arrays += [
            (s, out_perms[k].index(p.out_axis) if k in out_perms else p.out_axis)
            for k, s in enumerate(at["out_specs"])
        ]
        align = max(block_align(len(s["shape"]), a, s["dtype"]) for s, a in arrays)
        top = max(align, 1 << max(n - 1, 0).bit_length())
        out.append(tuple(b for b in (1 << j for j in range(top.bit_length())) if b % align == 0))
    return out
