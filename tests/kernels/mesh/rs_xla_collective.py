"""Reduce-scatter where XLA's psum_scatter does the communication and a Pallas kernel only casts.

The numbers are right and a pallas_call reads the inputs and reaches the result, but the multi-chip
work (moving and summing the partials across chips) is XLA's collective: work_outside_kernel.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P


def _cast(x_ref, o_ref):
    o_ref[...] = x_ref[...].astype(o_ref.dtype)


def _per_device(partial):
    summed = jax.lax.psum_scatter(partial.astype(jnp.float32), "x", scatter_dimension=0, tiled=True)
    return pl.pallas_call(_cast, out_shape=jax.ShapeDtypeStruct(summed.shape, partial.dtype))(summed)


def workload(partials):
    return jax.shard_map(_per_device, in_specs=P("x", None), out_specs=P("x", None), check_vma=False)(
        partials
    )
