"""A tiled Pallas TPU matmul: the candidate `make demo` compiles for tpu-v6e and validates."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_M, BLOCK_K, BLOCK_N = 128, 256, 128


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)  # [bm, bn]

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _a_map(i, j, k):  # a is (m, k): the [bm, bk] tile of this m-tile and k-step
    return i, k


def _b_map(i, j, k):  # b is (k, n): the [bk, bn] tile of this k-step and n-tile
    return k, j


def _o_map(i, j, k):  # out is (m, n): revisited across k, written on the last k-step
    return i, j


def _fit(dim: int, block: int, grain: int) -> int:
    """The largest block <= `block` that divides `dim` and is a multiple of `grain`; the whole dim if none."""
    b = min(block, dim) // grain * grain
    while b >= grain:
        if dim % b == 0:
            return b
        b -= grain
    return dim


@functools.partial(jax.jit, static_argnames=("bm", "bk", "bn", "interpret"))
def matmul(a, b, *, bm=BLOCK_M, bk=BLOCK_K, bn=BLOCK_N, interpret=False):
    m, k = a.shape
    _, n = b.shape
    # shape-generic: each block divides its dimension at every size (else the grid would drop a remainder)
    bm, bk, bn = _fit(m, bm, 16), _fit(k, bk, 128), _fit(n, bn, 128)
    return pl.pallas_call(
        _matmul_kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), _a_map), pl.BlockSpec((bk, bn), _b_map)],
        out_specs=pl.BlockSpec((bm, bn), _o_map),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k, transcendentals=0, bytes_accessed=2 * (m * k + k * n + m * n)
        ),
        interpret=interpret,
    )(a, b)


def workload(a, b):
    return matmul(a, b)
