"""Honest (issue 43): a tiled matmul whose pallas_call name spells its shape, as tpu-inference's gmm does
(`gmm-g_128-m_32768-...`): the name differs at every size, the program does not."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(a, b):
    m, k = a.shape
    n = b.shape[1]
    bm, bk, bn = min(m, 256), min(k, 256), 128
    return pl.pallas_call(
        _kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),  # a is (m, k): the [bm, bk] tile
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),  # b is (k, n): the [bk, bn] tile
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        name=f"gemm-m_{m}-k_{k}-n_{n}",
    )(a, b)
