"""jax's own TPU flash attention (jax.experimental.pallas.ops.tpu.flash_attention), imported, with 256-wide
blocks: right wherever 256 divides the sequence (small 256, the target 2048, the derived size), and
refusing any other length in its own words (its shape contract)."""

import math

from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

BLOCKS = BlockSizes(block_q=256, block_k_major=256, block_k=256, block_b=1)


def workload(q, k, v):
    return flash_attention(q, k, v, causal=True, sm_scale=1.0 / math.sqrt(q.shape[-1]), block_sizes=BLOCKS)
