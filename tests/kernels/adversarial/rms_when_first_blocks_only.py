"""Exploit (issue 43): the store sits under `pl.when(i < 8)` with no else, so the grid's first 8 row blocks
are written and the rest never are; every check size's grid has at most 8 blocks, the target's 128. Its op
set is the same at every size: only the empty branch, taken past block 8, tells."""

from _rms_rows import normed, rms_norm
from jax.experimental import pallas as pl


def _kernel(x_ref, scale_ref, o_ref):
    @pl.when(pl.program_id(0) < 8)
    def _():
        o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)


def workload(x, scale):
    return rms_norm(x, scale, kernel=_kernel)
