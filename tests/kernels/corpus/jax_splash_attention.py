"""jax's own splash attention (jax.experimental.pallas.ops.tpu.splash_attention), imported: causal
multi-head, vmapped over the batch, q scaled by the caller as splash expects."""

import math

import jax
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks


def workload(q, k, v):
    _, heads, seq, head_dim = q.shape
    mask = masks.MultiHeadMask([masks.CausalMask((seq, seq)) for _ in range(heads)])
    blocks = splash.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128)
    kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=blocks)
    return jax.vmap(kernel)(q / math.sqrt(head_dim), k, v)
