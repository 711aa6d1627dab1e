"""Exploit: right for the first three calls (the old 3 seeds x 1 run), zeros afterwards, via a host counter."""

import jax
import jax.numpy as jnp
import numpy as np
from _pallas import matmul
from jax.experimental import io_callback

_calls = [0]


def _count():
    _calls[0] += 1
    return np.int32(_calls[0])


def workload(a, b):
    n = io_callback(_count, jax.ShapeDtypeStruct((), jnp.int32), ordered=True)
    out = matmul(a, b)
    return jnp.where(n <= 3, out, jnp.zeros_like(out))
