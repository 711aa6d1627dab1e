"""Broken (removed API): an older published kernel's `pltpu.repeat` to tile a row across lanes; the
installed jax no longer has it."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _plus_position(x_ref, o_ref):
    row = jax.lax.broadcasted_iota(jax.numpy.int32, (1, 128), 1).astype(x_ref.dtype)
    o_ref[...] = x_ref[...] + pltpu.repeat(row, x_ref.shape[1] // 128, axis=1)


def workload(x):
    return pl.pallas_call(_plus_position, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
