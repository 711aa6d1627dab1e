"""A compile the installed libtpu refuses for a SparseCore kernel's op names that limit (classify.py)."""

from maxkernel.tpu_tools.judged.classify import _sparse_core_limit

# the shape of the compiler's report (MLIR op, its memref on a SparseCore subcore, the Python location)
REFUSED = """INTERNAL: Operation not supported

at location: loc("mask_kernel.3":10:1)

The MLIR operation involved:
  "tpu.vector_store_idx"(%0, %1) : (vector<8xi32>, memref<1x256xi32, #tpu.memory_space<vmem, sc_vector_subcore>>) -> ()

Suspected Python Code Location:
  /home/user/kernels/mask.py:42:8 [build_mask_sc]
  /home/user/kernels/mask.py:90:4 [workload]
"""


def test_a_sparse_core_op_the_compiler_refuses_is_named_with_its_kernel():
    said = _sparse_core_limit(REFUSED)
    assert "SparseCore kernel build_mask_sc" in said and "tpu.vector_store_idx" in said


def test_a_tensor_core_compile_error_says_nothing_of_sparse_cores():
    assert _sparse_core_limit(REFUSED.replace("sc_vector_subcore", "vmem")) == ""
