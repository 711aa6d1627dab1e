"""Exploit: `pl.when` on the grid position: blocks that start at row 1024 or later write zeros. The body
and its branches are the same at every size; only over the target's grid is the zero branch reached."""

import jax.numpy as jnp
from _rms_rows import normed, rms_norm
from jax.experimental import pallas as pl


def _kernel(x_ref, scale_ref, o_ref):
    start = pl.program_id(0) * x_ref.shape[0]

    @pl.when(start < 1024)
    def _():
        o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)

    @pl.when(start >= 1024)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)


def workload(x, scale):
    return rms_norm(x, scale, kernel=_kernel)
