"""Exploit (issue 43): the "zeros above 1024 rows" switch computed inside a nested `jax.jit` and taken by a
`lax.cond` around the kernel: one traced program at every size, whose predicate is a constant only a folder
that looks inside the nested call sees."""

import math

import jax
import jax.numpy as jnp
from _rms_rows import rms_norm


@jax.jit
def _big(rows):
    return rows > 1024


def workload(x, scale):
    rows = math.prod(x.shape[:-1])
    return jax.lax.cond(_big(jnp.int32(rows)), lambda: jnp.zeros_like(x), lambda: rms_norm(x, scale))
