"""A row-blocked elementwise reference (f32 [512, 1024]) for kernels analyzed, not validated, in tests."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "rows", "model": "test", "operator": "elementwise", "atol": 1e-3, "rtol": 1e-3}
SIZES = {"full": {"m": 512, "n": 1024}, "small": {"m": 512, "n": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    return (
        jax.random.normal(jax.random.key(0 if key is None else key), (d["m"], d["n"]), dtype or jnp.float32),
    )


def workload(x):
    return x * x + jnp.roll(x, 1, axis=1)


def get_flops(size="full"):
    d = SIZES[size]
    return 2 * d["m"] * d["n"]
