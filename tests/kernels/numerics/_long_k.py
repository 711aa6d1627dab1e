"""A bf16 projection tiled over K with its running sum in a VMEM accumulator of the caller's dtype."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE_M, TILE_N, TILE_K = 256, 256, 256


def _lhs(i, j, s):  # x is (m, k): the [tm, tk] tile of this m-tile at k-step s
    return i, s


def _rhs(i, j, s):  # w is (k, n): the [tk, tn] tile of k-step s for this n-tile
    return s, j


def _out(i, j, s):  # out is (m, n): one [tm, tn] tile, written after the last k-step
    return i, j


@functools.partial(jax.jit, static_argnames=("acc_dtype", "interpret"))
def projection(x, w, acc_dtype=jnp.float32, interpret=False):
    m, k = x.shape
    n = w.shape[1]
    tm, tn, tk = min(TILE_M, m), min(TILE_N, n), min(TILE_K, k)

    def kernel(x_ref, w_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        partial = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)  # [tm, tn]
        acc_ref[...] = (acc_ref[...].astype(jnp.float32) + partial).astype(acc_dtype)  # rounds to acc_dtype

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        grid=(m // tm, n // tn, k // tk),
        in_specs=[pl.BlockSpec((tm, tk), _lhs), pl.BlockSpec((tk, tn), _rhs)],
        out_specs=pl.BlockSpec((tm, tn), _out),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((tm, tn), acc_dtype)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k, transcendentals=0, bytes_accessed=2 * (m * k + k * n + m * n)
        ),
        interpret=interpret,
    )(x, w)
