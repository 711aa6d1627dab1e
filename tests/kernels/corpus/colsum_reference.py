"""Column sums of a (rows, cols) f32 array (written for the corpus)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "column_sum", "model": "corpus", "operator": "reduction", "atol": 1e-3, "rtol": 1e-3}
SIZES = {"full": {"rows": 8192, "cols": 1024}, "small": {"rows": 64, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    return (
        jax.random.normal(
            jax.random.key(0 if key is None else key), (d["rows"], d["cols"]), dtype or jnp.float32
        ),
    )


def workload(x):
    return jnp.sum(x, axis=0, keepdims=True)
