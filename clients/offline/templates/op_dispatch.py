"""Which op-family template writes a program (op_families.py recognises the family; scan_reduce.py and
window.py write the kernels, conv_split.py a convolution with more than an elementwise epilogue): its
own module, so the templates import op_families without a cycle."""

from __future__ import annotations

from maxkernel.clients.offline.templates.op_families import core_of, family_of
from maxkernel.clients.offline.templates.scan_reduce import build as build_scan_reduce
from maxkernel.clients.offline.templates.window import build as build_window
from maxkernel.tpu_tools.problem.emit import Program


def build(program: Program):
    """(the template, its target size, its dims) for a program of one of these families, or None when it
    is of none; ValueError when it is of one but outside what its template does."""
    family = family_of(program)
    if family is None:
        return None
    try:
        core = core_of(program, family)
    except ValueError:
        if family != "conv":
            raise
        from maxkernel.clients.offline.templates.conv_split import build as build_conv_split

        split = build_conv_split(program)  # a conv then a norm or a reduction: two kernels
        if split is None:
            raise
        return split
    if family in ("scan", "arg"):
        return build_scan_reduce(core)
    return build_window(core)
