"""One f32 matmul kernel written at each precision a kernel can compute an f32 dot: as XLA does at DEFAULT on a
TPU (operands cast to bf16, one MXU pass), as Mosaic does an f32 dot at DEFAULT (f32 vmatmuls), and at
HIGHEST. `workload` is the bf16-pass one; `matmul(mode)` builds each (the estimate's precision tests)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK = 512


def _kernel(a_ref, b_ref, o_ref, acc_ref, *, mode):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a, b = a_ref[...], b_ref[...]  # [bm, bk], [bk, bn]
    if mode == "bf16_pass":  # XLA's DEFAULT f32 dot on a TPU: BF16_BF16_F32
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    precision = lax.Precision.HIGHEST if mode == "highest" else None
    acc_ref[...] += jnp.dot(a, b, precision=precision, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(mode: str):
    """mode: bf16_pass | default | highest."""

    def run(a, b):
        m, k = a.shape
        n = b.shape[1]
        bm, bk, bn = min(BLOCK, m), min(BLOCK, k), min(BLOCK, n)
        return pl.pallas_call(
            functools.partial(_kernel, mode=mode),
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

    return run


workload = matmul("bf16_pass")
