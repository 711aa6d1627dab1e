"""Adversary: the residual gated MLP (residual_mlp_reference) with its gate projection in int8, quantized per
tensor and symmetric (one absmax scale for all of x, one for all of wg, int32 accumulation); the up and down
projections stay bf16 with f32 accumulation. The gate's quantization noise puts the output's error at about
2.7x the reference's own on average: over the rule's 2x, under the 2x-plus-half-an-ulp the rule once allowed."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS, BLOCK_HIDDEN = 128, 256


def _per_tensor_int8(a):
    """Symmetric per-tensor quantization: int8 values and the one f32 scale that maps them back."""
    scale = jnp.max(jnp.abs(a.astype(jnp.float32))) / 127.0
    return jnp.round(a.astype(jnp.float32) / scale).astype(jnp.int8), scale


def _gated_mlp_kernel(scale_ref, xq_ref, x_ref, wgq_ref, wu_ref, wd_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(1) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    gate_i32 = jnp.dot(xq_ref[...], wgq_ref[...], preferred_element_type=jnp.int32)  # [bm, bh]
    gate = gate_i32.astype(jnp.float32) * scale_ref[0]  # back to x @ wg's scale
    up = jnp.dot(x_ref[...], wu_ref[...], preferred_element_type=jnp.float32)  # [bm, bh]
    hidden = (jax.nn.silu(gate) * up).astype(wd_ref.dtype)  # [bm, bh]
    acc_ref[...] += jnp.dot(hidden, wd_ref[...], preferred_element_type=jnp.float32)  # [bm, d]

    @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = (x_ref[...].astype(jnp.float32) + acc_ref[...]).astype(o_ref.dtype)


def _row_block(i, h):  # x, its int8 copy and out are (rows, d): this row block, all of d
    return i, 0


def _hidden_cols(i, h):  # wg (int8) and wu are (d, hidden): the hidden block of this step
    return 0, h


def _hidden_rows(i, h):  # wd is (hidden, d): the hidden block of this step
    return h, 0


@functools.partial(jax.jit, static_argnames=("interpret",))
def workload(x, wg, wu, wd, interpret=False):
    rows, d = x.shape
    hidden = wg.shape[1]
    bm, bh = min(BLOCK_ROWS, rows), min(BLOCK_HIDDEN, hidden)
    xq, x_scale = _per_tensor_int8(x)
    wgq, wg_scale = _per_tensor_int8(wg)
    scale = jnp.reshape(x_scale * wg_scale, (1,))
    return pl.pallas_call(
        _gated_mlp_kernel,
        grid=(rows // bm, hidden // bh),
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.SMEM),
            pl.BlockSpec((bm, d), _row_block),
            pl.BlockSpec((bm, d), _row_block),
            pl.BlockSpec((d, bh), _hidden_cols),
            pl.BlockSpec((d, bh), _hidden_cols),
            pl.BlockSpec((bh, d), _hidden_rows),
        ],
        out_specs=pl.BlockSpec((bm, d), _row_block),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=96 * 1024 * 1024
        ),
        cost_estimate=pl.CostEstimate(
            flops=6 * rows * d * hidden,
            transcendentals=rows * hidden,
            bytes_accessed=3 * rows * d + d * hidden + 2 * (2 * d * hidden + rows * d),
        ),
        interpret=interpret,
    )(scale, xq, x, wgq, wu, wd)
