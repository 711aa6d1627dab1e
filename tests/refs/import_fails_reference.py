"""A reference whose own import breaks (line 6): reference_error, never the kernel's fault."""

import jax.numpy as jnp

SIZES = {"small": {"n": 8}}
SCALE = jnp.float32(1.0) / undefined_name  # noqa: F821


def create_inputs(dtype=None, *, key=None, size="small"):
    return (jnp.ones((SIZES[size]["n"],)),)


def workload(x):
    return x * SCALE
