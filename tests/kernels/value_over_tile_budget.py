"""A tiled matmul whose body also builds a 512 KiB value with trailing unit dims: f32[8, 128, 128, 1, 1], one
(8, 128) vreg tile per element (131 072 tiles). It fits VMEM, but Mosaic unrolls every op per tile, so its
compile would take minutes; the tile budget refuses it before the compile."""

import jax.numpy as jnp
from _matmul_base import tiled_matmul
from jax.experimental import pallas as pl


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    wide = jnp.broadcast_to(a_ref[...].astype(jnp.float32).reshape(1, 128, 128, 1, 1), (8, 128, 128, 1, 1))
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32) + jnp.sum(wide) * 0.0

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(a, b):
    return tiled_matmul(a, b, kernel=_kernel)
