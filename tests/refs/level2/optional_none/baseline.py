"""A level-2-style file of our own whose create_inputs leaves an optional argument out as None (as upstream's
grouped-matmul baselines pass rhs_bias=None), in the middle of its inputs."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "optional_none_l2", "rows": 256, "cols": 512}


def create_inputs(dtype=jnp.float32):
    k1, k2 = jax.random.split(jax.random.key(11))
    x = jax.random.normal(k1, (CONFIG["rows"], CONFIG["cols"]), dtype=dtype)
    scale = jax.random.uniform(k2, (CONFIG["cols"],), dtype=dtype)
    return x, None, scale


def workload(x, bias=None, scale=None):
    y = x * scale
    return y if bias is None else y + bias
