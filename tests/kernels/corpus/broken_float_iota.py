"""Broken (Mosaic rejects): a float iota inside the kernel (a causal mask built from float positions, as
LLM answers write it). TPU interpret mode computes it; Mosaic's tpu.iota takes integers only."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _plus_position(x_ref, o_ref):
    pos = jax.lax.broadcasted_iota(jnp.float32, x_ref.shape, 1)
    o_ref[...] = x_ref[...] + pos


def workload(x):
    return pl.pallas_call(_plus_position, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
