"""A 20 MiB f32 array plus one: a one-block copy of it needs 40 MiB of VMEM, over the 32 MiB scoped default."""

import jax
import jax.numpy as jnp

SIZES = {"full": {"rows": 5120, "cols": 1024}}


def create_inputs(dtype=None, *, key=None, size="full"):
    key = jax.random.key(0) if key is None else key
    d = SIZES[size]
    return (jax.random.normal(key, (d["rows"], d["cols"]), jnp.float32),)


def workload(x):
    return x + 1.0
