"""Adversary against the error rule itself: the exact answer plus +-0.015 at every element, noise shaped to
stay under 2x the max error of a bf16-pass reference (about 0.01 at this K): the max ratio passes, the mean
does not."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


def _noisy(acc, i, j):
    rows = jax.lax.broadcasted_iota(jnp.int32, acc.shape, 0) + i * acc.shape[0]
    cols = jax.lax.broadcasted_iota(jnp.int32, acc.shape, 1) + j * acc.shape[1]
    sign = jnp.where((rows * 7 + cols * 13) % 2 == 0, 1.0, -1.0)
    return acc + sign * 0.015


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.full_f32, finish=_noisy, interpret=interpret)
