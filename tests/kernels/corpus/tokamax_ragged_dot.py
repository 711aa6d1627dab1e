"""tokamax's ragged dot (tokamax.ragged_dot, its Mosaic TPU implementation), imported: the MoE grouped
matmul, against corpus/gmm_reference.py."""

import jax.numpy as jnp
import tokamax


def workload(lhs, rhs, group_sizes):
    return tokamax.ragged_dot(
        lhs, rhs, group_sizes, preferred_element_type=jnp.float32, implementation="mosaic"
    )
