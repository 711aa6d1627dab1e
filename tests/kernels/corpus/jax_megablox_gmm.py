"""jax's own megablox grouped matmul (jax.experimental.pallas.ops.tpu.megablox.gmm), imported: the MoE
kernel MaxText uses, against corpus/gmm_reference.py."""

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.megablox import gmm


def workload(lhs, rhs, group_sizes):
    return gmm(lhs, rhs, group_sizes, preferred_element_type=jnp.float32, tiling=(128, 128, 128))
