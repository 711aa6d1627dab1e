"""Honest Pallas building blocks the adversarial kernels wrap around their tricks."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(a, b, bm=128, bk=128, bn=128):
    """A tiled matmul with an f32 accumulator: the real work, in the kernel."""
    m, k = a.shape
    _, n = b.shape
    return pl.pallas_call(
        _matmul_kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),  # a is (m, k): the [bm, bk] tile
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),  # b is (k, n): the [bk, bn] tile
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy(x):
    """A Pallas copy: a kernel that does none of the work."""
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _fill_kernel(value):
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.full(o_ref.shape, value, o_ref.dtype)

    return kernel


def fill(x, shape, dtype, value):
    """A kernel that reads `x` (so it looks wired in) and writes a constant."""
    return pl.pallas_call(_fill_kernel(value), out_shape=jax.ShapeDtypeStruct(shape, dtype))(x)
