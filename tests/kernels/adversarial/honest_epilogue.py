"""Honest twin: the matmul in Pallas, then a small jnp epilogue (reshape, transpose, astype, a tiny add)."""

import jax.numpy as jnp
from _pallas import matmul


def workload(a, b):
    out = matmul(a, b)  # [m, n]
    out = out.reshape(-1).reshape(out.shape).T.T.astype(jnp.float32)
    return (out + jnp.zeros((out.shape[1],), jnp.float32)).astype(a.dtype)
