"""Exploit: a racy DMA kernel (tests/kernels/racy_dma.py) that switches the race detector off on import."""

import jax
from jax._src.pallas.mosaic.interpret import race_detection_state
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

race_detection_state.RaceDetectionState.check_read = lambda self, *a, **k: None
race_detection_state.RaceDetectionState.check_write = lambda self, *a, **k: None


def _kernel(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem.at[0])
    copy.start()
    o_ref[...] = buf[...] + 1.0  # BUG: read before copy.wait()
    copy.wait()


def workload(x):
    return pl.pallas_call(
        _kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA((1,))],
    )(x)
