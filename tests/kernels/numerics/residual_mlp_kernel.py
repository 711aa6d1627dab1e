"""The residual gated MLP as one Pallas kernel: the gate in f32, rounded to bf16 once before the down
projection, the down projection accumulated in f32 over f-blocks, the residual added in f32."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS, BLOCK_F = 256, 512


def _mlp_kernel(x_ref, wg_ref, wu_ref, wd_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(1) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]  # [bm, d]
    g = jnp.dot(x, wg_ref[...], preferred_element_type=jnp.float32)  # [bm, bf]
    u = jnp.dot(x, wu_ref[...], preferred_element_type=jnp.float32)  # [bm, bf]
    h = (jax.nn.silu(g) * u).astype(wd_ref.dtype)  # one rounding before the down projection
    acc_ref[...] += jnp.dot(h, wd_ref[...], preferred_element_type=jnp.float32)  # [bm, d]

    @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = (x.astype(jnp.float32) + acc_ref[...]).astype(o_ref.dtype)


def _rows(i, j):  # x and out are (rows, d): this row block, every column
    return i, 0


def _up(i, j):  # wg, wu are (d, f): the f-block of this step
    return 0, j


def _down(i, j):  # wd is (f, d): the f-block of this step
    return j, 0


@functools.partial(jax.jit, static_argnames=("interpret",))
def mlp(x, wg, wu, wd, interpret=False):
    rows, d = x.shape
    f = wg.shape[1]
    bm, bf = min(BLOCK_ROWS, rows), min(BLOCK_F, f)
    return pl.pallas_call(
        _mlp_kernel,
        grid=(rows // bm, f // bf),
        in_specs=[
            pl.BlockSpec((bm, d), _rows),
            pl.BlockSpec((d, bf), _up),
            pl.BlockSpec((d, bf), _up),
            pl.BlockSpec((bf, d), _down),
        ],
        out_specs=pl.BlockSpec((bm, d), _rows),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=100 * 1024 * 1024
        ),
        cost_estimate=pl.CostEstimate(
            flops=6 * rows * d * f, transcendentals=rows * f, bytes_accessed=2 * (2 * rows * d + 3 * d * f)
        ),
        interpret=interpret,
    )(x, wg, wu, wd)


def workload(x, wg, wu, wd):
    return mlp(x, wg, wu, wd)
