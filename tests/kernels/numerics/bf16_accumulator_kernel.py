"""Adversary: one bf16 pass per tile, but the running sum over the k-steps kept in a bf16 accumulator
(half the VMEM and stores): fine over a short K, a rounding per step over a long one."""

import sys
from pathlib import Path

import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.one_pass, acc_dtype=jnp.bfloat16, interpret=interpret)
