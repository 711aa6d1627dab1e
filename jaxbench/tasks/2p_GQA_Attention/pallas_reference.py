"""Expert Pallas TPU reference for 2p causal grouped-query attention, q [B, S, Hq, D], k/v [B, S, Hkv, D].

Flash attention in the task's BSHD layout, with no transpose: q, k and v are viewed (a free reshape)
as [B, S, H*D], so head h is the h-th D-wide column block and a BlockSpec picks it directly. Query head
h reads kv head h // G (G = Hq / Hkv) through the kv index map. Online softmax over kv blocks keeps m
(row max), l (row sum) and acc (unnormalised output) in f32 VMEM; under causal masking the last grid
axis walks only the (q-block, kv-block) pairs on or below the diagonal, from scalar-prefetched tables,
so skipped blocks cost neither a DMA nor a step, and only pairs that straddle the diagonal build a mask.
Scores are rounded as the task rounds them: bf16(bf16(q·k) · bf16(D^-1/2)). Self-contained (jax only).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Tunables (v6e). 1024x1024 score tiles keep each step's MXU work (~0.5 GFLOP) far above the per-step
# overhead; the f32 score/probability temporaries (~4 MiB each) fit VMEM with room to spare.
BLOCK_Q = 1024
BLOCK_KV = 1024
CAUSAL = True
MASK_VALUE = -1e9  # the task's fill; finite, so exp() of a masked score is exactly 0
VMEM_LIMIT_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class GQAConfig:
    """Block sizes along the query and key/value sequence; hashable (a cache or search-node key)."""

    block_q: int = BLOCK_Q
    block_kv: int = BLOCK_KV
    vmem_limit_bytes: int | None = VMEM_LIMIT_BYTES

    def clamped(self, seq_len: int) -> "GQAConfig":
        """The same config with each block shrunk to the sequence (small sizes reuse the file)."""
        return dataclasses.replace(
            self, block_q=min(self.block_q, seq_len), block_kv=min(self.block_kv, seq_len)
        )

    def validate(self, seq_len: int) -> None:
        for name, block, align in (("block_q", self.block_q, 8), ("block_kv", self.block_kv, 128)):
            if block <= 0:
                raise ValueError(f"{name}={block} should be positive")
            if seq_len % block:
                raise ValueError(f"S={seq_len} should be divisible by {name}={block}")
            if block != seq_len and block % align:
                raise ValueError(f"{name}={block} should be a multiple of {align} (or equal S={seq_len})")


CONFIG = GQAConfig()


def _block_pairs(num_q: int, num_kv: int, block_q: int, block_kv: int, causal: bool):
    """(q-block, kv-block) pairs to visit, kv ascending within each q block (static numpy tables)."""
    q_ids, kv_ids = [], []
    for qi in range(num_q):
        last_kv = min(num_kv - 1, ((qi + 1) * block_q - 1) // block_kv) if causal else num_kv - 1
        q_ids += [qi] * (last_kv + 1)
        kv_ids += list(range(last_kv + 1))
    return np.asarray(q_ids, np.int32), np.asarray(kv_ids, np.int32)


def _gqa_kernel(
    q_ids_ref, kv_ids_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, sm_scale, causal, num_kv
):
    step = pl.program_id(2)
    qi, ki = q_ids_ref[step], kv_ids_ref[step]
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]
    q_start, kv_start = qi * block_q, ki * block_kv
    if causal:
        # lax.div, not //: indices are non-negative, and floor division lowers through sign().
        last_kv = jnp.minimum(num_kv - 1, jax.lax.div(q_start + block_q - 1, block_kv))
    else:
        last_kv = num_kv - 1

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def _update(masked: bool):
        q = q_ref[...]  # [block_q, D], query head h
        k = k_ref[...]  # [block_kv, D], kv head h // G
        v = v_ref[...]  # [block_kv, D]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        # [block_q, block_kv]: round as the task does, bf16(bf16(q·k) * bf16 scale)
        s = (s.astype(q.dtype) * jnp.asarray(sm_scale, q.dtype)).astype(jnp.float32)
        if masked:
            rows = q_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = kv_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, MASK_VALUE)
        m_prev = m_ref[...]  # [block_q, 1]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))  # [block_q, 1]
        alpha = jnp.exp(m_prev - m_new)  # [block_q, 1] rescales the running sums
        p = jnp.exp(s - m_new)  # [block_q, block_kv] f32 (the final-sum rounding of P cannot be mirrored)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)  # [block_q, D]
        acc_ref[...] = alpha * acc_ref[...] + pv
        m_ref[...] = m_new

    if causal:
        crosses_diagonal = kv_start + block_kv - 1 > q_start
        pl.when(jnp.logical_not(crosses_diagonal))(lambda: _update(masked=False))
        pl.when(crosses_diagonal)(lambda: _update(masked=True))
    else:
        _update(masked=False)

    @pl.when(ki == last_kv)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)  # [block_q, D]


def gqa_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    *,
    causal: bool = CAUSAL,
    sm_scale: float | None = None,
    config: GQAConfig = CONFIG,
    interpret: bool | object = False,
) -> jax.Array:
    """Grouped-query attention. query: [B, S, Hq, D], key/value: [B, S, Hkv, D] -> [B, S, Hq, D]."""
    if query.ndim != 4 or key.shape != value.shape or key.shape[:2] != query.shape[:2]:
        raise ValueError(f"expected BSHD q/k/v sharing B, S: {query.shape}, {key.shape}, {value.shape}")
    batch, seq_len, num_q_heads, head_dim = query.shape
    num_kv_heads = key.shape[2]
    if key.shape[3] != head_dim or num_q_heads % num_kv_heads:
        raise ValueError(f"Hq={num_q_heads} should be a multiple of Hkv={num_kv_heads}, D shared")
    if head_dim % 128:
        raise ValueError(f"D={head_dim} should be a multiple of 128 (heads are lane-aligned column blocks)")
    group = num_q_heads // num_kv_heads
    if sm_scale is None:
        sm_scale = head_dim**-0.5
    cfg = config.clamped(seq_len)
    cfg.validate(seq_len)
    bq, bk = cfg.block_q, cfg.block_kv
    num_q, num_kv = seq_len // bq, seq_len // bk
    q_ids, kv_ids = _block_pairs(num_q, num_kv, bq, bk, causal)
    grid = (batch, num_q_heads, len(q_ids))

    # q is (b, s, hq*d): query head h's [bq, D] column block of this step's q block
    def q_index_map(b, h, step, q_ids_ref, kv_ids_ref):
        return b, q_ids_ref[step], h

    # k and v are (b, s, hkv*d): kv head h // G's [bk, D] column block of this step's kv block
    # (lax.div: h is non-negative, and floor division lowers through sign())
    def kv_index_map(b, h, step, q_ids_ref, kv_ids_ref):
        return b, kv_ids_ref[step], jax.lax.div(h, group)

    # out is (b, s, hq*d): the q block's tile stays resident while its kv blocks stream past
    def o_index_map(b, h, step, q_ids_ref, kv_ids_ref):
        return b, q_ids_ref[step], h

    sq = pl.Squeezed()
    visited = int(len(q_ids)) * bq * bk  # score entries computed per (b, h)
    itemsize = query.dtype.itemsize
    cost = pl.CostEstimate(
        flops=4 * batch * num_q_heads * visited * head_dim,
        transcendentals=batch * num_q_heads * visited,
        bytes_accessed=batch * num_q_heads * itemsize * head_dim * (2 * seq_len + 2 * len(q_ids) * bk),
    )
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=grid,
        in_specs=[
            pl.BlockSpec((sq, bq, head_dim), q_index_map),
            pl.BlockSpec((sq, bk, head_dim), kv_index_map),
            pl.BlockSpec((sq, bk, head_dim), kv_index_map),
        ],
        out_specs=pl.BlockSpec((sq, bq, head_dim), o_index_map),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),  # m: running row max
            pltpu.VMEM((bq, 1), jnp.float32),  # l: running row sum of exp
            pltpu.VMEM((bq, head_dim), jnp.float32),  # acc: unnormalised output
        ],
    )
    kernel = functools.partial(_gqa_kernel, sm_scale=sm_scale, causal=causal, num_kv=num_kv)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((batch, seq_len, num_q_heads * head_dim), query.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=cfg.vmem_limit_bytes,
        ),
        cost_estimate=cost,
        interpret=interpret,
        name="gqa_attention_2p",
    )(
        jnp.asarray(q_ids),
        jnp.asarray(kv_ids),
        query.reshape(batch, seq_len, num_q_heads * head_dim),
        key.reshape(batch, seq_len, num_kv_heads * head_dim),
        value.reshape(batch, seq_len, num_kv_heads * head_dim),
    )
    return out.reshape(batch, seq_len, num_q_heads, head_dim)


def workload(query: jax.Array, key: jax.Array, value: jax.Array) -> jax.Array:
    """Same signature as the 2p task's workload."""
    return gqa_attention(query, key, value, causal=CAUSAL, config=CONFIG, interpret=False)
