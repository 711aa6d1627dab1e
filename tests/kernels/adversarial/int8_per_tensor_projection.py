"""Wrong on outlier channels: a projection with int8 activations under ONE scale for the whole tensor.

On N(0,1) activations the absmax is ~4.5, so an int8 step is ~0.035 and the projection lands within the
reference's tolerance (tests/refs/quantizable_projection_reference.py). A few channels 10-20x larger (LLM.int8's
outlier features) stretch the step so far that the other channels round to a handful of levels. Must fail
validation by default (the `channel_scales` regime), pass with one seed.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BK, BN = 128, 128, 128


def _kernel(xq_ref, w_ref, s_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    xq = xq_ref[...].astype(jnp.bfloat16)  # [BM, BK]: int8 levels are exact in bf16
    acc_ref[...] += jnp.dot(xq, w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] * s_ref[0, 0]).astype(o_ref.dtype)


def workload(x, w):
    m, k = x.shape
    _, n = w.shape
    xf = x.astype(jnp.float32)
    scale = jnp.max(jnp.abs(xf)) / 127.0  # one scale for the whole tensor
    xq = jnp.round(xf / scale).astype(jnp.int8)  # [m, k]
    return pl.pallas_call(
        _kernel,
        grid=(m // BM, n // BN, k // BK),
        in_specs=[
            pl.BlockSpec((BM, BK), lambda i, j, kk: (i, kk)),  # xq is (m, k): the [BM, BK] tile
            pl.BlockSpec((BK, BN), lambda i, j, kk: (kk, j)),  # w is (k, n): the [BK, BN] tile
            pl.BlockSpec((1, 1), lambda i, j, kk: (0, 0)),  # the scale, at every step
        ],
        out_specs=pl.BlockSpec((BM, BN), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((BM, BN), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(xq, w, scale.reshape(1, 1))
