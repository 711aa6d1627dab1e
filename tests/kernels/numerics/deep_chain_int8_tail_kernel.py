"""Adversary (issue 43's held-out cheat): the deep residual chain (deep_chain_reference) with its LAST TWO
layers in int8, quantized per tensor and symmetric (one absmax scale for all of the layer's input
activations, one for all of its weight, int32 accumulation); the first six layers are the honest twin's
(deep_chain_honest_kernel), bf16 with f32 accumulation. The int8 noise enters at the end of a chain whose
reference has accumulated six layers of bf16 rounding before it."""

import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deep_chain_honest_kernel as honest  # noqa: E402

INT8_LAYERS = 2  # the last this many layers run in int8


def _per_tensor_int8(a):
    """Symmetric per-tensor quantization: int8 values and the one f32 scale that maps them back."""
    scale = jnp.max(jnp.abs(a.astype(jnp.float32))) / 127.0
    return jnp.round(a.astype(jnp.float32) / scale).astype(jnp.int8), scale


def _int8_kernel(scale_ref, xq_ref, xres_ref, wq_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(xq_ref[...], wq_ref[...], preferred_element_type=jnp.int32)  # [bm, bn]

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        h = jax.nn.gelu(acc_ref[...].astype(jnp.float32) * scale_ref[0])  # back to x @ w's scale
        o_ref[...] = (xres_ref[...].astype(jnp.float32) + h).astype(o_ref.dtype)


def _int8_layer(x, w, layer, interpret):
    rows, d = x.shape
    bm, bn, bk = min(honest.BLOCK_ROWS, rows), min(honest.BLOCK_COLS, d), min(honest.BLOCK_K, d)
    xq, x_scale = _per_tensor_int8(x)
    wq, w_scale = _per_tensor_int8(w[layer])
    return pl.pallas_call(
        _int8_kernel,
        grid=(rows // bm, d // bn, d // bk),
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.SMEM),  # the product of the two scales
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),  # x's int8 copy as the dot's lhs
            pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),  # x as the residual: row block, column block
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),  # w[layer]'s int8 copy: k block, column block
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.int32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * rows * d * d,
            transcendentals=rows * d,
            bytes_accessed=2 * (rows * d * (d // bn) + d * d * (rows // bm) + 2 * rows * d),
        ),
        interpret=interpret,
    )(jnp.reshape(x_scale * w_scale, (1,)), xq, x, wq)


@functools.partial(jax.jit, static_argnames=("interpret",))
def workload(x, w, interpret=False):
    layers = w.shape[0]
    for layer in range(layers):
        quantized = layer >= layers - INT8_LAYERS
        x = (_int8_layer if quantized else honest._layer)(x, w, layer, interpret)
    return x
