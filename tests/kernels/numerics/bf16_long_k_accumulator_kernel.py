"""Adversary: the bf16 long-K projection (bf16_long_k_reference) with its running sum in a bf16 accumulator
(half the scratch), so each of the 10 k-steps rounds the partial sum to bf16 where the reference rounds once:
its worst element about 2.4-3.6x the reference's (the rule allows 2x; 2x plus half an ulp let it through)."""

import sys
from pathlib import Path

import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _long_k  # noqa: E402


def workload(x, w, interpret=False):
    return _long_k.projection(x, w, acc_dtype=jnp.bfloat16, interpret=interpret)
