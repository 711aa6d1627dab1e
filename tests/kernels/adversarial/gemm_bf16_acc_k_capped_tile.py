"""Exploit (issue 43): a matmul that accumulates in bf16 across K steps, its K tile capped at 512: every
check size has one K step (K <= 512), so the accumulator's rounding never compounds there; the target's
K of 8192 takes 16."""

import sys
from pathlib import Path

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _matmul_base import tiled_matmul  # noqa: E402


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    part = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)  # [bm, bn]
    acc_ref[...] = (acc_ref[...].astype(jnp.float32) + part).astype(acc_ref.dtype)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(a, b):
    k = a.shape[1]
    return tiled_matmul(
        a, b, bm=128, bk=min(k, 512), bn=128, kernel=_kernel, scratch=[pltpu.VMEM((128, 128), jnp.bfloat16)]
    )
