"""Bounds the estimate must respect: a run-time grid axis bounded by its scalar-prefetch tables, and the
roofline clamp under a Pallas kernel covering both TensorCores when the kernel splits across them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.megablox import gmm

from maxkernel.tpu_tools.cost.estimate import estimate_pallas, roofline
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls
from tests.tpu_tools.problem.test_pallas_info import matmul


def test_megablox_dynamic_m_axis_is_bounded_by_its_prefetch_tables():
    """gmm's m-tile count is known only at run time; its group tables are tiles_m + groups - 1 long."""
    m, k, n, groups, tm = 8192, 4096, 4096, 8, 512
    args = [
        jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
        jax.ShapeDtypeStruct((groups, k, n), jnp.bfloat16),
        jax.ShapeDtypeStruct((groups,), jnp.int32),
    ]
    jaxpr = jax.jit(lambda a, b, gs: gmm(a, b, gs, tiling=(tm, 1024, 1024))).trace(*args).jaxpr
    calls = find_pallas_calls(jaxpr)
    assert [c.grid for c in calls] == [(k // 1024, None, n // 1024)]  # the traced grid: axis 1 dynamic
    est = estimate_pallas(calls, "tpu-v5e")
    call = est.per_call[0]
    bound = m // tm + groups - 1
    assert call.grid == (k // 1024, bound, n // 1024)
    assert any(f"bounded by {bound}" in note and "upper bound" in note for note in call.notes), call.notes
    # Gigabytes, not the megabytes of one m tile: every lhs and rhs byte at least once.
    assert est.hbm_bytes_moved >= 2 * (m * k + groups * k * n)
    assert est.estimated_time_us >= roofline(2 * m * k * n, 2 * (m * k + groups * k * n), "tpu-v5e").time_us


def test_a_kernel_split_across_v5p_cores_is_clamped_to_both_cores_roofline():
    """A compute-bound matmul with parallel leading axes runs on both v5p TensorCores: under one core's
    roofline, never under both cores'."""
    m = k = n = 8192
    a = jax.ShapeDtypeStruct((m, k), jnp.bfloat16)
    calls = find_pallas_calls(jax.make_jaxpr(lambda x, y: matmul(x, y, 512, 1024, 1024))(a, a))
    est = estimate_pallas(calls, "tpu-v5p")
    assert est.per_call[0].cores == 2
    flops, nbytes = 2.0 * m * k * n, 2.0 * 3 * m * k
    one_core = roofline(flops, nbytes, "tpu-v5p", cores=1).time_us
    both = roofline(flops, nbytes, "tpu-v5p", cores=2).time_us
    assert both <= est.estimated_time_us < one_core

    # A kernel without a parallel axis stays on one core and is clamped to that core's roofline.

    one = calls[0].model_copy(update={"dimension_semantics": ("arbitrary", "arbitrary", "arbitrary")})
    est1 = estimate_pallas([one], "tpu-v5p")
    assert est1.per_call[0].cores == 1
    assert est1.estimated_time_us >= one_core
