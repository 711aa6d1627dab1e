"""Causal flash attention: grid (batch, heads, q-blocks, kv-blocks), online softmax in f32 scratch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.templates.base import MiB, Template, divides

SOURCE = '''"""Causal flash attention, layout [B, H, S, D] (offline template `flash`, ${operator}).

kv is the innermost, "arbitrary" axis: running max / sum / accumulator live in f32 VMEM scratch.
kv blocks above the diagonal are skipped, and their index map repeats the last needed block so the
pipeline fetches nothing new for them.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_Q = ${block_q}
BLOCK_KV = ${block_kv}
BUFFERS = ${buffers}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
MASK_VALUE = -1e9  # the reference's fill


def _last_kv(qi, block_q, block_kv):
    """Index of the last kv block a q block attends to (causal)."""
    return (qi * block_q + block_q - 1) // block_kv


def _kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, sm_scale):
    qi, ki = pl.program_id(2), pl.program_id(3)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]
    last = _last_kv(qi, block_q, block_kv)

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(ki <= last)
    def _update():
        q = q_ref[...]  # [block_q, D]
        k = k_ref[...]  # [block_kv, D]
        v = v_ref[...]  # [block_kv, D]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = (s.astype(q.dtype) * jnp.asarray(sm_scale, q.dtype)).astype(jnp.float32)  # [block_q, block_kv]
        rows = qi * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = ki * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(cols <= rows, s, MASK_VALUE)
        m_prev = m_ref[...]  # [block_q, 1]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)  # [block_q, block_kv] f32
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(ki == jnp.minimum(last, pl.num_programs(3) - 1))
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)  # [block_q, D]


def _spec(shape, index_map):
    if BUFFERS == 2:
        return pl.BlockSpec(shape, index_map)
    return pl.BlockSpec(shape, index_map, pipeline_mode=pl.Buffered(BUFFERS))


def workload(query, key, value):
    b, h, s, d = query.shape
    bq, bkv = min(BLOCK_Q, s), min(BLOCK_KV, s)
    if s % bq or s % bkv:
        raise ValueError(f"seq_len={s} should be divisible by block_q={bq} and block_kv={bkv}")

    # q / out are (b, h, s, d): the [bq, D] rows of q block qi
    def q_map(bi, hi, qi, ki):
        return bi, hi, qi, 0

    # k / v are (b, h, s, d): kv block ki, clamped to the diagonal so skipped steps fetch nothing new
    def kv_map(bi, hi, qi, ki):
        return bi, hi, jnp.minimum(ki, _last_kv(qi, bq, bkv)), 0

    sq = pl.Squeezed()
    cost = pl.CostEstimate(
        flops=2 * b * h * s * s * d,  # causal: about half of 4·S²·D
        transcendentals=b * h * s * s // 2,
        bytes_accessed=query.dtype.itemsize * b * h * s * d * (2 + s // bq),
    )
    return pl.pallas_call(
        functools.partial(_kernel, sm_scale=d**-0.5),
        out_shape=jax.ShapeDtypeStruct(query.shape, query.dtype),
        grid=(b, h, s // bq, s // bkv),
        in_specs=[
            pl.BlockSpec((sq, sq, bq, d), q_map),
            _spec((sq, sq, bkv, d), kv_map),
            _spec((sq, sq, bkv, d), kv_map),
        ],
        out_specs=pl.BlockSpec((sq, sq, bq, d), q_map),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),  # m: running row max
            pltpu.VMEM((bq, 1), jnp.float32),  # l: running row sum
            pltpu.VMEM((bq, d), jnp.float32),  # acc: unnormalised output
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        cost_estimate=cost,
        interpret=False,
        name="offline_flash",
    )(query, key, value)
'''

BLOCKS = (128, 256, 512, 1024)


def _dims(sizes: Mapping[str, Any]) -> dict[str, int]:
    return {k: int(sizes[k]) for k in ("batch", "num_heads", "seq_len", "head_dim")}


def _problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
    if not d:
        return []
    out = []
    for key in ("block_q", "block_kv"):
        if why := divides(int(c[key]), d["seq_len"], 128):
            out.append(f"{key}: seq_len={why}")
    return out


def _vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
    bq, bkv, hd = min(c["block_q"], d["seq_len"]), min(c["block_kv"], d["seq_len"]), d["head_dim"]
    return 2 * 2 * 2 * bq * hd + int(c["buffers"]) * 2 * 2 * bkv * hd + 4 * bq * (hd + 256) + 3 * 4 * bq * bkv


def _cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
    s = d["seq_len"]
    bq, bkv = min(c["block_q"], s), min(c["block_kv"], s)
    steps = d["batch"] * d["num_heads"] * (s // bq) * (s // bkv)
    flops = 2 * d["batch"] * d["num_heads"] * s * s * d["head_dim"]
    penalty = 1e6 if _vmem(c, d) > 48 * MiB else 0.0
    return flops / 900e12 * 1e6 + 0.35 * steps + penalty


FLASH = Template(
    name="flash",
    operators=("causal_mha",),
    source=SOURCE,
    tunables={"block_q": BLOCKS, "block_kv": BLOCKS, "buffers": (2, 1)},
    dims_of=_dims,
    problems=_problems,
    vmem_bytes=_vmem,
    cost_us=_cost,
    initial={"block_q": 128, "block_kv": 128, "buffers": 2},
    constraints=("seq_len % min(block_q, seq_len) == 0 and seq_len % min(block_kv, seq_len) == 0",),
    grid_axes=lambda c: ["batch", "heads", "q", "kv"],
    semantics=lambda c: ["parallel", "parallel", "parallel", "arbitrary"],
)
