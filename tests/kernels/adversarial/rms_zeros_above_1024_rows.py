"""Exploit (held-out style): a right RMSNorm up to 1024 rows; above, a Python branch on the static row
count makes the kernel write zeros. The derived size of 12p (4 x 256 = 1024 rows) never crosses it."""

import jax.numpy as jnp
from _rms_rows import normed, rms_norm


def _zeros_kernel(x_ref, scale_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)


def _kernel(x_ref, scale_ref, o_ref, *, rows):
    if rows > 1024:  # a static shape: traced as a different body
        _zeros_kernel(x_ref, scale_ref, o_ref)
        return
    o_ref[...] = normed(x_ref, scale_ref).astype(o_ref.dtype)


def workload(x, scale):
    return rms_norm(x, scale, kernel=_kernel)
