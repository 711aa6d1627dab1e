"""The work census counts a scatter-add by its operands, not by the one scalar add of its update_jaxpr.

A scatter-add left in plain JAX beside kernels (the offline model's glue, tests/refs/unlowerable) is allowed
only while it is a small share of the counted flops; walked as a structural op, its update_jaxpr (one add of
two scalars) was all that was counted, so any amount of scatter work outside the kernels was free.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from maxkernel.tpu_tools.problem.work_check import census_of, work_verdict


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _specs():
    return (
        jax.ShapeDtypeStruct((4096, 1024), jnp.float32),
        jax.ShapeDtypeStruct((4096, 1024), jnp.float32),
        jax.ShapeDtypeStruct((4096,), jnp.int32),
    )


def test_a_scatter_add_counts_its_operands():
    census = census_of(jax.make_jaxpr(lambda h, y, ids: h.at[ids].add(y))(*_specs()))
    assert census.outside_flops["scatter-add"] == 2 * 4096 * 1024 + 4096


def test_a_token_kernel_beside_a_scatter_add_doing_the_work_is_refused():
    """A kernel that doubles 512K values while XLA's scatter-add adds 4M: refused (it passed, at <1% outside)."""

    def candidate(h, y, ids):
        small = pl.pallas_call(
            _double, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=True
        )(h[:8, :128])
        return h.at[ids].add(y).at[:8, :128].add(small)

    def reference(h, y, ids):
        return h.at[ids].add(y)

    verdict = work_verdict(
        census_of(jax.make_jaxpr(candidate)(*_specs())), census_of(jax.make_jaxpr(reference)(*_specs()))
    )
    assert verdict is not None and "scatter-add" in verdict and "outside the pallas_calls" in verdict


def test_a_kernel_written_with_pl_kernel_is_a_kernel_and_its_work_is_inside():
    """pl.kernel (mpmd_map in jax 0.10.2) is a Mosaic kernel as pallas_call is: a baseline written with it
    (level 2's 64p) is no `no_kernel`, and the dot in its body is not work outside the kernels."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from maxkernel.tpu_tools.problem.work_check import census_of

    def workload(x, w):
        @pl.kernel(
            out_type=jax.ShapeDtypeStruct((128, 128), jnp.float32),
            mesh=pltpu.create_tensorcore_mesh(axis_name="core"),
            scratch_types=(pltpu.VMEM((128, 128), jnp.float32),),
        )
        def matmul(x_ref, w_ref, o_ref, acc):
            acc[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
            o_ref[...] = acc[...]

        return matmul(x, w)

    from maxkernel.tpu_tools.hardware.chip_trace import trace_as_target
    from maxkernel.tpu_tools.hardware.targets import parse_target

    spec = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    with trace_as_target(parse_target("tpu-v6e")):  # the tensorcore mesh asks the chip for its cores
        census = census_of(jax.make_jaxpr(workload)(spec, spec))
    assert census.num_pallas_calls == 1
    assert sum(census.outside_flops.values()) == 0 and sum(census.inside_flops.values()) > 0
