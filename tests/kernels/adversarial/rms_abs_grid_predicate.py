"""Exploit (issue 43): zeros past row block 8, the predicate written `abs(i) >= 8` so that a folder that
knows only comparisons and arithmetic cannot tell which blocks take it."""

import jax.numpy as jnp
from _rms_rows import normed, rms_norm
from jax.experimental import pallas as pl


def _kernel(x_ref, scale_ref, o_ref):
    o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)

    @pl.when(jnp.abs(pl.program_id(0)) >= 8)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)


def workload(x, scale):
    return rms_norm(x, scale, kernel=_kernel)
