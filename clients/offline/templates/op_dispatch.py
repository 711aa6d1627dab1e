"""Which op-family template writes a program (op_families.py recognises the family; scan_reduce.py and
window.py write the kernels, conv_rows.py a 2-D NCHW conv when its cost beats window.py's, conv_stats.py one summed over its rows and columns, conv_norm.py one normalised over its output in two passes, conv_moments.py one only summed (its sums of y and y^2), conv_split.py a convolution with more than an elementwise epilogue): its
own module, so the templates import op_families without a cycle."""

from __future__ import annotations

from maxkernel.clients.offline.templates.base import MiB, cheapest
from maxkernel.clients.offline.templates.conv_depth import build as build_conv_depth
from maxkernel.clients.offline.templates.conv_moments import build as build_conv_moments
from maxkernel.clients.offline.templates.conv_norm import build as build_conv_norm
from maxkernel.clients.offline.templates.conv_rows import build as build_conv_rows
from maxkernel.clients.offline.templates.conv_stats import build as build_conv_stats
from maxkernel.clients.offline.templates.op_families import Core, core_of, family_of
from maxkernel.clients.offline.templates.scan_reduce import build as build_scan_reduce
from maxkernel.clients.offline.templates.window import build as build_window
from maxkernel.tpu_tools.problem.emit import Program


def build(program: Program, rest_template=None):
    """(the template, its target size, its dims) for a program of one of these families, or None when it
    is of none; ValueError when it is of one but outside what its template does. `rest_template(program)`
    writes what follows a convolution (model.py passes its own `program_template`: no import back up)."""
    family = family_of(program)
    if family is None:
        return None
    try:
        core = core_of(program, family)
    except ValueError:
        if family != "conv":
            raise
        try:  # conv, then a sum over its rows and columns: one kernel, the conv output never in HBM
            return build_conv_stats(program)
        except ValueError:
            pass
        from maxkernel.clients.offline.templates.conv_split import build as build_conv_split

        try:  # conv whose output is only summed (degree <= 2 in it): one pass of its moments
            moments = build_conv_moments(program)
        except ValueError:
            moments = None
        try:  # conv, then a norm over its output: two passes that recompute the conv
            norm = build_conv_norm(program)
        except ValueError:
            norm = None
        try:  # or the conv written to HBM and read back by a kernel for the rest
            split = build_conv_split(program, rest_template, build_conv) if rest_template else None
        except ValueError:
            if norm is None and moments is None:
                raise
            split = None
        found = [p for p in (moments, norm, split) if p is not None]
        if not found:
            raise
        best = cheapest(*(p[0] for p in found), vmem_bytes=56 * MiB)
        return next(p for p in found if p[0] is best)
    if family in ("scan", "arg"):
        return build_scan_reduce(core)
    if family == "conv":
        return build_conv(core)
    return build_window(core)


def build_conv(core: Core):
    """window.py's convolution or conv_rows', whichever its own cost model puts cheaper at the target
    (conv_rows refuses 3-D, strided, dilated, grouped and padded convolutions: window.py keeps those; a
    3-D one may be conv_depth's, conv_rows' dot with the depth taps stacked on the channels). Where one
    of them has no block that fits, the other; ValueError (window.py's) when neither does."""
    try:
        window, miss = build_window(core), None
    except ValueError as e:
        window, miss = None, e
    try:
        rows = build_conv_rows(core)
    except ValueError:
        try:  # a 3-D conv: conv_rows' dot with the depth taps stacked on the channels in VMEM
            rows = build_conv_depth(core)
        except ValueError:
            rows = None
    if window is None or rows is None:
        if window is None and rows is None:
            raise miss
        return window or rows
    return rows if cheapest(window[0], rows[0], vmem_bytes=48 * MiB) is rows[0] else window
