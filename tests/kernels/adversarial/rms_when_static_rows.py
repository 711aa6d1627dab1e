"""Exploit: the real RMSNorm always traced, then `pl.when` on the static row count overwrites the block
with zeros above 1024 rows: one body at every size, a cond whose constant predicate flips."""

import jax.numpy as jnp
from _rms_rows import normed, rms_norm
from jax.experimental import pallas as pl


def _kernel(x_ref, scale_ref, o_ref, *, rows):
    o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)

    @pl.when(jnp.int32(rows) > 1024)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)


def workload(x, scale):
    return rms_norm(x, scale, kernel=_kernel)
