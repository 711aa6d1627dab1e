"""A level-2-style file that imports a package no one installs (the loader's one-line error)."""

import jax.numpy as jnp
import maxkernel_no_such_package  # noqa: F401

CONFIG = {"rows": 8}


def create_inputs(dtype=jnp.float32):
    return (jnp.ones((CONFIG["rows"], 128), dtype),)


def workload(x):
    return x * 2
