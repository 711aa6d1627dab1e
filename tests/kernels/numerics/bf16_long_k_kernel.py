"""The bf16 long-K projection with an f32 accumulator, rounded to bf16 once at the store: what XLA does."""

import sys
from pathlib import Path

import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _long_k  # noqa: E402


def workload(x, w, interpret=False):
    return _long_k.projection(x, w, acc_dtype=jnp.float32, interpret=interpret)
