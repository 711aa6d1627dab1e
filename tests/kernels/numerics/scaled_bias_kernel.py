"""Adversary against the error rule: relu(x @ w) scaled by (1 + 1.8 * 2**-9), a bias inside a bf16 pass's
noise at every element (max and mean ratios under 2x); the signed mean error gives it away."""

import sys
from pathlib import Path

import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


def _skewed(acc, i, j):
    y = jnp.maximum(acc, 0.0)
    return y * (1.0 + 1.8 * 2.0**-9)


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.full_f32, finish=_skewed, interpret=interpret)
