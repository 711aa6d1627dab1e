"""Finds the judge's timing loop in sys.modules and slows its clock 10x; does ~50 ms of honest work per call.

The fingerprint check sees the swap, and the parent's window sees ~45 ms per call the child cannot explain.
"""

import sys
import time

import jax
import jax.numpy as jnp

_real = time.perf_counter
for _name, _mod in list(sys.modules.items()):
    if _name.endswith(".timed_loop"):
        _mod._clock = lambda: _real() * 0.1


def workload(a, b):
    def body(i, acc):  # the same dot many times over, each on a row-rolled a, rolled back: exact
        part = jnp.dot(jnp.roll(a, i, axis=0), b, preferred_element_type=jnp.float32)
        return jnp.maximum(acc, jnp.roll(part, -i, axis=0))

    init = jnp.full((a.shape[0], b.shape[1]), -jnp.inf, jnp.float32)
    return jax.lax.fori_loop(0, 192, body, init).astype(a.dtype)
