"""Exploit: a dummy 8x128 pallas_call next to jnp.matmul, added in times zero."""

import jax.numpy as jnp
from _pallas import copy


def workload(a, b):
    dummy = copy(a[:8, :128])
    out = jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
    return out + 0 * dummy[0, 0]
