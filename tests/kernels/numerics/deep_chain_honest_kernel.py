"""The deep residual chain (deep_chain_reference) as one Pallas matmul per layer: x @ w[i] accumulated in f32
over k-blocks, gelu and the residual added in f32, the layer's output rounded to bf16 once. The honest twin
of deep_chain_int8_tail_kernel: every layer at the reference's precision or better."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS, BLOCK_COLS, BLOCK_K = 512, 512, 512


def _layer_kernel(xk_ref, xres_ref, w_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(xk_ref[...], w_ref[...], preferred_element_type=jnp.float32)  # [bm, bn]

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        h = jax.nn.gelu(acc_ref[...])
        o_ref[...] = (xres_ref[...].astype(jnp.float32) + h).astype(o_ref.dtype)


def _layer(x, w, layer, interpret):
    rows, d = x.shape
    bm, bn, bk = min(BLOCK_ROWS, rows), min(BLOCK_COLS, d), min(BLOCK_K, d)
    return pl.pallas_call(
        _layer_kernel,
        grid=(rows // bm, d // bn, d // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),  # x as the dot's lhs: row block, k block
            pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),  # x as the residual: row block, column block
            pl.BlockSpec((None, bk, bn), lambda i, j, k: (layer, k, j)),  # w[layer]: k block, column block
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * rows * d * d,
            transcendentals=rows * d,
            bytes_accessed=2 * (rows * d * (d // bn) + d * d * (rows // bm) + 2 * rows * d),
        ),
        interpret=interpret,
    )(x, x, w)


@functools.partial(jax.jit, static_argnames=("interpret",))
def workload(x, w, interpret=False):
    for layer in range(w.shape[0]):
        x = _layer(x, w, layer, interpret)
    return x
