"""A reduction over column blocks: out[r, l] = sum_j x[r, j*128 + l]. The grid's only axis reduces."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "column_block_sum", "operator": "reduction", "atol": 1e-3, "rtol": 1e-3}
SIZES = {"small": {"R": 64, "C": 1024}, "full": {"R": 512, "C": 8192}}


def create_inputs(dtype=None, *, key=None, size="small"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    return (jax.random.normal(key, (d["R"], d["C"]), dtype or jnp.float32),)


def workload(x):
    r, c = x.shape
    return x.reshape(r, c // 128, 128).sum(axis=1)
