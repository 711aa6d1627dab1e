"""relu(x @ w) computed as a TPU computes the reference: one bf16 pass, relu in f32."""

import sys
from pathlib import Path

import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.one_pass, finish=lambda acc, i, j: jnp.maximum(acc, 0.0), interpret=interpret)
