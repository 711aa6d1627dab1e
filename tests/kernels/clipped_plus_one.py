"""y = x + 1 for |x| <= 100 only: right on the task's N(0,1) inputs, wrong on large magnitudes.

A subtly-wrong kernel for the extra-input-case tests (plus_one reference): the standard validation passes,
a `large_magnitude` case catches the clip.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = jnp.clip(x_ref[...], -100.0, 100.0) + 1.0  # the bug: a clip nobody asked for


def workload(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
