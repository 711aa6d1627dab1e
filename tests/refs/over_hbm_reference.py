"""A reference whose XLA program does not fit a v5e's 16 GiB of HBM at `full`: a 65536 x 65536 f32 outer
product (16 GiB) sorted along its rows, the sort's own buffer beside it. At `small` it fits everywhere."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "over_hbm", "model": "test", "operator": "outer_sort", "atol": 1e-5, "rtol": 1e-5}
SIZES = {"full": {"n": 65536}, "small": {"n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    return (jax.random.normal(key, (SIZES[size]["n"],), dtype or jnp.float32),)


def workload(x):
    return jnp.sort(x[:, None] * x[None, :], axis=0)[0]
