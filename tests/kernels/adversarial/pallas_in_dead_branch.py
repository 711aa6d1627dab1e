"""Exploit: the Pallas kernel sits in a lax.cond branch that is never taken; jnp.dot answers."""

import jax
import jax.numpy as jnp
from _pallas import matmul


def workload(a, b):
    never = a[0, 0] > 1e30
    return jax.lax.cond(
        never,
        lambda: matmul(a, b),
        lambda: jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype),
    )
