"""Expert Pallas TPU reference for 14p: out[g] = x[g] @ w[g] for G pre-split, equal groups.

A grouped matmul over grid (G, M/bm, N/bn, K/bk): the group axis is squeezed out of every block, so
each grid step is one [bm, bk] @ [bk, bn] MXU tile of one expert. K is innermost and sequential
("arbitrary") into an f32 VMEM accumulator zeroed on the first k step and rounded to bf16 once on
the last, so each output tile reaches HBM once. Self-contained (jax only).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Tunables (v6e). Each expert's 1024 rows make one m-tile, so its [K, N] weight streams from HBM
# exactly once; 1024x2048 output tiles (~680 flop/byte) sit above the v6e ridge (~560 flop/byte).
BLOCK_M = 1024
BLOCK_N = 2048
BLOCK_K = 1024
VMEM_LIMIT_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class GroupedMatmulConfig:
    """Tile sizes of each group's [M/G, K] @ [K, N] matmul; hashable (a cache or search-node key)."""

    block_m: int = BLOCK_M
    block_k: int = BLOCK_K
    block_n: int = BLOCK_N
    vmem_limit_bytes: int | None = VMEM_LIMIT_BYTES

    def clamped(self, m: int, k: int, n: int) -> "GroupedMatmulConfig":
        """The same config with each block shrunk to the problem dim (small sizes reuse the file)."""
        return dataclasses.replace(
            self, block_m=min(self.block_m, m), block_k=min(self.block_k, k), block_n=min(self.block_n, n)
        )

    def validate(self, m: int, k: int, n: int) -> None:
        for dim_name, dim, block_name, block, align in (
            ("M/G", m, "block_m", self.block_m, 8),
            ("K", k, "block_k", self.block_k, 128),
            ("N", n, "block_n", self.block_n, 128),
        ):
            if block <= 0:
                raise ValueError(f"{block_name}={block} should be positive")
            if dim % block:
                raise ValueError(f"{dim_name}={dim} should be divisible by {block_name}={block}")
            if block != dim and block % align:
                raise ValueError(
                    f"{block_name}={block} should be a multiple of {align} (or equal {dim_name}={dim})"
                )


CONFIG = GroupedMatmulConfig()


def _grouped_matmul_kernel(x_ref, w_ref, o_ref, acc_ref, *, k_steps: int):
    k = pl.program_id(3)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]  # [block_m, block_k] bf16, this group's rows
    w = w_ref[...]  # [block_k, block_n] bf16, this group's weight
    acc_ref[...] += jnp.dot(x, w, preferred_element_type=jnp.float32)  # [block_m, block_n] f32

    @pl.when(k == k_steps - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)  # one bf16 rounding, as the einsum


def grouped_matmul(
    x: jax.Array,
    weights: jax.Array,
    *,
    config: GroupedMatmulConfig = CONFIG,
    interpret: bool | object = False,
) -> jax.Array:
    """out[g] = x[g] @ weights[g]. x: [G, M/G, K], weights: [G, K, N] -> [G, M/G, N] in x's dtype."""
    groups, m, k = x.shape
    g2, k2, n = weights.shape
    if groups != g2 or k != k2:
        raise ValueError(f"shapes do not chain: x {x.shape}, weights {weights.shape}")
    cfg = config.clamped(m, k, n)
    cfg.validate(m, k, n)
    bm, bk, bn = cfg.block_m, cfg.block_k, cfg.block_n
    grid = (groups, m // bm, n // bn, k // bk)

    # x is (g, m, k): load group g's [bm, bk] tile of m-tile i at k-step kk
    def x_index_map(g, i, j, kk):
        return g, i, kk

    # weights is (g, k, n): load group g's [bk, bn] tile of n-tile j at k-step kk
    def w_index_map(g, i, j, kk):
        return g, kk, j

    # out is (g, m, n): group g's (i, j) tile stays resident across the k axis, written once
    def o_index_map(g, i, j, kk):
        return g, i, j

    sq = pl.Squeezed()
    itemsize = x.dtype.itemsize
    cost = pl.CostEstimate(
        flops=2 * groups * m * n * k,
        transcendentals=0,
        # Per group: x re-read per n-tile, weights per m-tile, out written once.
        bytes_accessed=itemsize * groups * (m * k * grid[2] + k * n * grid[1] + m * n),
    )
    return pl.pallas_call(
        functools.partial(_grouped_matmul_kernel, k_steps=grid[3]),
        out_shape=jax.ShapeDtypeStruct((groups, m, n), x.dtype),
        grid=grid,
        in_specs=[pl.BlockSpec((sq, bm, bk), x_index_map), pl.BlockSpec((sq, bk, bn), w_index_map)],
        out_specs=pl.BlockSpec((sq, bm, bn), o_index_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=cfg.vmem_limit_bytes,
        ),
        cost_estimate=cost,
        interpret=interpret,
        name="ragged_dot_14p",
    )(x, weights)


def workload(x: jax.Array, weights: jax.Array) -> jax.Array:
    """Same signature as the 14p task's workload."""
    return grouped_matmul(x, weights, config=CONFIG, interpret=False)
