"""Exploit (issue 43): the output stays in HBM (`pl.ANY`) and each grid step DMAs its row block there, the
destination row clamped to block 7: right with at most 8 row blocks, and past row 64 nothing is written.
No index map says so: only the DMA's destination slice, folded over the grid, does."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, o_hbm):
    i = pl.program_id(0)

    def scoped(buf, sem):
        buf[...] = x_ref[...] + 1  # [8, cols]
        copy = pltpu.make_async_copy(buf, o_hbm.at[pl.ds(jnp.minimum(i, 7) * 8, 8)], sem)
        copy.start()
        copy.wait()

    pl.run_scoped(scoped, pltpu.VMEM((8, x_ref.shape[1]), x_ref.dtype), pltpu.SemaphoreType.DMA)


def workload(x):
    # x is (rows, cols): row block i
    def x_map(i):
        return i, 0

    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, x.shape[1]), x_map)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
    )(x)
