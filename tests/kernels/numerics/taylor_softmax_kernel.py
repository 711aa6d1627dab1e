"""Adversary: a row softmax whose exp is a degree-4 Taylor polynomial after halving the argument twice
(exp(y) = p(y/4)**4): no transcendental unit, a relative error of ~1e-4 over the logits' range."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS = 128


def _exp(y):
    z = y / 4.0
    p = 1.0 + z * (1.0 + z * (0.5 + z * (1.0 / 6.0 + z / 24.0)))
    p = jnp.maximum(p, 0.0)
    p = p * p
    return p * p


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]  # [block_rows, cols]
    e = _exp(jnp.maximum(x - jnp.max(x, axis=-1, keepdims=True), -16.0))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def _rows(i):  # x and out are (rows, cols): this row block
    return i, 0


@functools.partial(jax.jit, static_argnames=("interpret",))
def workload(x, interpret=False):
    rows, cols = x.shape
    b = min(BLOCK_ROWS, rows)
    return pl.pallas_call(
        _softmax_kernel,
        grid=(rows // b,),
        in_specs=[pl.BlockSpec((b, cols), _rows)],
        out_specs=pl.BlockSpec((b, cols), _rows),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret,
    )(x)
