"""A kernel for Griffin's RG-LRU region (tests/refs/griffin_model.py, region
Griffin.blocks.{0,1}.recurrent_block.rg_lru.recurrence): recurrentgemma's own Pallas scan
(recurrentgemma.jax.pallas.lru_pallas_scan) for the recurrence, the gates as the library writes them."""

import jax
import jax.numpy as jnp
from recurrentgemma.jax import pallas


def workload(gate_a_logits, a_param, gate_x, x, segment_pos):
    log_a = -8.0 * jax.nn.sigmoid(gate_a_logits) * jax.nn.softplus(a_param)
    a = jnp.exp(log_a)
    a_square = jnp.exp(2 * log_a)
    gated_x = gate_x * x
    reset = (segment_pos == 0).astype(jnp.float32)[..., None]
    multiplier = reset + (1 - reset) * jnp.sqrt(1 - a_square)
    y, _ = pallas.lru_pallas_scan(gated_x * multiplier, a * (1 - reset))
    return (y,)
