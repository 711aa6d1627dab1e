"""Two grid axes but one dimension semantic."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, o_ref):
    o_ref[...] = a_ref[...] + 1


def workload(a, b):
    m, _ = a.shape
    n = b.shape[1]
    return pl.pallas_call(
        _kernel,
        grid=(m // 128, n // 128),
        in_specs=[pl.BlockSpec((128, 128), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(a[:, :n])
