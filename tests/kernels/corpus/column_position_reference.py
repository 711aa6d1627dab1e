"""y = x + column index (f32), written for the corpus."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "plus_column", "model": "corpus", "operator": "elementwise"}
SIZES = {"full": {"rows": 256, "cols": 512}, "small": {"rows": 16, "cols": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    return (
        jax.random.normal(
            jax.random.key(0 if key is None else key), (d["rows"], d["cols"]), dtype or jnp.float32
        ),
    )


def workload(x):
    return x + jnp.arange(x.shape[1], dtype=x.dtype)[None, :]
