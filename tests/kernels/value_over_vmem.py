"""A tiled matmul whose body also builds a 256 MiB f32 value (a block broadcast to 8192 x 8192): more than any
TPU's VMEM, so no compile can take it. The value is used (summed into the accumulator), so nothing drops it."""

import jax.numpy as jnp
from _matmul_base import tiled_matmul
from jax.experimental import pallas as pl


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    big = jnp.broadcast_to(a_ref[0:1, 0:1].astype(jnp.float32), (8192, 8192))
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32) + jnp.sum(big) * 0.0

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(a, b):
    return tiled_matmul(a, b, kernel=_kernel)
