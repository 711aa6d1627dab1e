"""A JAXBench-style baseline: CONFIG, create_inputs(dtype), workload; one fixed seed, no sizes."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "gemm_small", "model": "test", "operator": "dense_matmul", "M": 256, "K": 256, "N": 256}


def create_inputs(dtype=jnp.bfloat16):
    k1, k2 = jax.random.split(jax.random.key(42))
    return jax.random.normal(k1, (256, 256), dtype), jax.random.normal(k2, (256, 256), dtype)


def workload(a, b):
    return jnp.dot(a, b)
