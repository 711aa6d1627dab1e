"""jax's own TPU paged attention (jax.experimental.pallas.ops.tpu.paged_attention), imported: the
decode kernel vLLM-style servers use, against corpus/paged_attention_reference.py."""

from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention


def workload(q, k_pages, v_pages, lengths, page_indices):
    return paged_attention(q, k_pages, v_pages, lengths, page_indices, pages_per_compute_block=4)
