"""Adversary against the error rule: exact where the reference is exact (relu's zeros), and off by 0.015
(under 2x a bf16-pass reference's worst error, about 0.01 here) at every other element: the max ratio
passes, the mean does not."""

import sys
from pathlib import Path

import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


def _skewed(acc, i, j):
    y = jnp.maximum(acc, 0.0)
    return jnp.where(y > 0, y + 0.015, 0.0)


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.full_f32, finish=_skewed, interpret=interpret)
