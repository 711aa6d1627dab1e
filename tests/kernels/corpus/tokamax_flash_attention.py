"""tokamax's flash attention (tokamax.dot_product_attention, its Mosaic TPU implementation), imported:
causal, against corpus/attention_reference.py. tokamax takes [batch, seq, heads, head_dim]: the caller
swaps the reference's [batch, heads, seq, head_dim] axes. tokamax picks its blocks from the chip it is
traced for (pltpu.get_tpu_info()), so it only traces as a TPU."""

import jax.numpy as jnp
import tokamax


def workload(q, k, v):
    q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))  # [batch, seq, heads, head_dim]
    out = tokamax.dot_product_attention(q, k, v, is_causal=True, implementation="mosaic")
    return jnp.swapaxes(out, 1, 2)
