"""jax's own TPU matmul example (jax.experimental.pallas.ops.tpu.matmul), imported: a working public
kernel, against examples/matmul_reference.py (bf16 in, f32 accumulation, bf16 out)."""

from jax.experimental.pallas.ops.tpu.matmul import matmul


def workload(a, b):
    return matmul(a, b, block_shape=(128, 128), block_k=256)
