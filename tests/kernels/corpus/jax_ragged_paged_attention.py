"""jax's own ragged paged attention (jax.experimental.pallas.ops.tpu.ragged_paged_attention), imported:
the mixed prefill/decode kernel vLLM's TPU backend serves with, against
corpus/ragged_paged_attention_reference.py. Block sizes are passed: its tuned-block lookup reads
jax.devices()[0].device_kind, which is the host's CPU off the chip."""

import math

from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention


def workload(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    return ragged_paged_attention(
        q,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        sm_scale=1 / math.sqrt(q.shape[-1]),
        num_kv_pages_per_block=8,
        num_queries_per_block=16,
    )
