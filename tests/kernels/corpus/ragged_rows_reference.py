"""Ragged rows: the first `n_valid` rows of x doubled, the rest zero (a MoE-style kernel whose grid
length is data: the number of row tiles that hold tokens)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "ragged_rows", "model": "corpus", "operator": "ragged"}
SIZES = {"full": {"rows": 4096, "cols": 1024}, "small": {"rows": 64, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0 if key is None else key)
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (d["rows"], d["cols"]), dtype or jnp.float32)
    # a multiple of the kernel's 8-row tile, at least one tile, never all rows
    n_valid = 8 * jax.random.randint(kn, (1,), 1, d["rows"] // 8, dtype=jnp.int32)
    return x, n_valid


def workload(x, n_valid):
    rows = jnp.arange(x.shape[0])[:, None]
    return jnp.where(rows < n_valid[0], 2 * x, jnp.zeros_like(x))
