"""jax's own megablox transposed grouped matmul (jax.experimental.pallas.ops.tpu.megablox.gmm.tgmm),
imported: the MoE weight-gradient kernel, against corpus/tgmm_reference.py. tgmm takes the
lhs as [k, m]: the transpose is the caller's, as in megablox's own backward pass."""

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.megablox.gmm import tgmm


def workload(x, dy, group_sizes):
    return tgmm(x.T, dy, group_sizes, preferred_element_type=jnp.float32, tiling=(128, 128, 128))
