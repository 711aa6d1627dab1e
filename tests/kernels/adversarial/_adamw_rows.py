"""A row-blocked AdamW update (tests/refs/scalar_inputs/adamw_step_reference.py's numerics) whose step comes from a
function of the step's SMEM ref: the honest kernel reads it, the adversary bakes one seed's value in."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

B1, B2, EPS, LR, WEIGHT_DECAY = 0.9, 0.999, 1e-8, 1e-3, 0.01


def read_step(step_ref):
    return step_ref[0]  # the traced step: one int32 word in SMEM


def _kernel(p_ref, g_ref, m_ref, v_ref, step_ref, p_out, m_out, v_out, *, step_of):
    t = jnp.full((1, 1), step_of(step_ref).astype(jnp.float32))  # pow on a (1, 1) vector: no scalar powf
    bc1 = (1.0 - lax.pow(jnp.full((1, 1), B1, jnp.float32), t))[0, 0]
    bc2 = (1.0 - lax.pow(jnp.full((1, 1), B2, jnp.float32), t))[0, 0]
    g = g_ref[...]  # [block_rows, cols]
    m = B1 * m_ref[...] + (1.0 - B1) * g
    v = B2 * v_ref[...] + (1.0 - B2) * g * g
    p = p_ref[...]
    p_out[...] = p - LR * ((m / bc1) / (jnp.sqrt(v / bc2) + EPS) + WEIGHT_DECAY * p)
    m_out[...] = m
    v_out[...] = v


def adamw(param, grad, m, v, step, step_of=read_step, block_rows=8):
    rows, cols = param.shape
    br = min(block_rows, rows)

    # every [rows, cols] operand: the [br, cols] slab of row-block i
    def rows_map(i):
        return i, 0

    spec = pl.BlockSpec((br, cols), rows_map)
    out = pl.pallas_call(
        functools.partial(_kernel, step_of=step_of),
        out_shape=[jax.ShapeDtypeStruct(param.shape, param.dtype)] * 3,
        grid=(pl.cdiv(rows, br),),
        in_specs=[spec] * 4 + [pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=[spec] * 3,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(param, grad, m, v, step.reshape(1))
    return tuple(out)
