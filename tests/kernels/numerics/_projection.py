"""A tiled Pallas projection whose per-tile arithmetic a test kernel chooses (`tile_dot`, `finish`)."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BK, BN = 128, 256, 128


def _x_map(i, j, k):  # x is (m, k): the [bm, bk] tile of this m-tile and k-step
    return i, k


def _w_map(i, j, k):  # w is (k, n): the [bk, bn] tile of this k-step and n-tile
    return k, j


def _o_map(i, j, k):  # out is (m, n): revisited across k, written on the last k-step
    return i, j


def projection(x, w, tile_dot, finish=None, acc_dtype=jnp.float32, interpret=False):
    """sum over k-steps of tile_dot(x_tile, w_tile) (accumulated in `acc_dtype`), then `finish(acc, i, j)`."""
    m, k = x.shape
    n = w.shape[1]
    bm, bk, bn = min(BM, m), min(BK, k), min(BN, n)

    def kernel(x_ref, w_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += tile_dot(x_ref[...], w_ref[...]).astype(acc_dtype)  # [bm, bn]

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _store():
            acc = acc_ref[...].astype(jnp.float32)
            if finish is not None:
                acc = finish(acc, pl.program_id(0), pl.program_id(1))
            o_ref[...] = acc.astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), _x_map), pl.BlockSpec((bk, bn), _w_map)],
        out_specs=pl.BlockSpec((bm, bn), _o_map),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), acc_dtype)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k, transcendentals=0, bytes_accessed=4 * (m * k + k * n + m * n)
        ),
        interpret=interpret,
    )(x, w)


def one_pass(a, b):
    """What XLA does on a TPU for an f32 dot at DEFAULT: bf16 operands, f32 accumulation."""
    return jnp.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)


def full_f32(a, b):
    return jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)


jit = functools.partial(jax.jit, static_argnames=("interpret",))
