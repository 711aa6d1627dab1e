"""Attention in one Pallas kernel per head (the whole sequence in VMEM), its two dots chosen by the caller."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _head(h):  # q, k, v and out are (heads, seq, dim): this head's [seq, dim] slab
    return h, 0, 0


def attention(q, k, v, dot, interpret=False):
    heads, seq, dim = q.shape

    def kernel(q_ref, k_ref, v_ref, o_ref):
        s = dot(q_ref[0], k_ref[0].T) / dim**0.5  # [seq, seq]
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = p / jnp.sum(p, axis=-1, keepdims=True)
        o_ref[0] = dot(p, v_ref[0])  # [seq, dim]

    spec = pl.BlockSpec((1, seq, dim), _head)
    return pl.pallas_call(
        kernel,
        grid=(heads,),
        in_specs=[spec, spec, spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret,
    )(q, k, v)


def bf16_pass(a, b):
    return jnp.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)


def f32(a, b):
    return jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)


jit = functools.partial(jax.jit, static_argnames=("interpret",))
