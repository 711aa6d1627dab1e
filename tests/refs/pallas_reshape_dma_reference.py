"""A Pallas reference whose DMA reads a reshaped HBM ref: Mosaic compiles it; jax 0.10.2's TPU interpreter
cannot run it (its DMA reader has no indices for a reshape transform)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG = {"name": "reshape_dma_l2", "rows": 64, "cols": 256}


def _kernel(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm.reshape(CONFIG["rows"] // 8, 8, CONFIG["cols"]), buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] * 2


def create_inputs(dtype=jnp.float32):
    return (jax.random.normal(jax.random.key(1), (CONFIG["rows"], CONFIG["cols"]), dtype),)


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct((rows // 8, 8, cols), x.dtype),
        scratch_shapes=[pltpu.VMEM((rows // 8, 8, cols), x.dtype), pltpu.SemaphoreType.DMA(())],
    )(x)
