"""Expert Pallas TPU reference for 41k: relu(bf16(x @ W) + b), the bias add and ReLU fused.

A tiled matmul over grid (M/bm, N/bn, K/bk) with K innermost and sequential ("arbitrary"): the f32
VMEM accumulator is zeroed on the first k step; on the last one the tile is rounded to bf16 (the
dot's single rounding in the task's graph), the bias row added in bf16 and the ReLU applied, all in
VMEM, so the [M, N] product never makes an HBM round trip. Self-contained (jax only).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Tunables (v6e). A 1024x2048 output tile has arithmetic intensity bm*bn/(bm+bn) ~ 680 flop/byte,
# above the v6e ridge (~560); double-buffered inputs + output + the f32 accumulator ~ 28 MiB.
BLOCK_M = 1024
BLOCK_N = 2048
BLOCK_K = 1024
VMEM_LIMIT_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """Tile sizes of the [M, K] @ [K, N] matmul; hashable so it can key a cache or a search node."""

    block_m: int = BLOCK_M
    block_k: int = BLOCK_K
    block_n: int = BLOCK_N
    vmem_limit_bytes: int | None = VMEM_LIMIT_BYTES

    def clamped(self, m: int, k: int, n: int) -> "MatmulConfig":
        """The same config with each block shrunk to the problem dim (small sizes reuse the file)."""
        return dataclasses.replace(
            self, block_m=min(self.block_m, m), block_k=min(self.block_k, k), block_n=min(self.block_n, n)
        )

    def validate(self, m: int, k: int, n: int) -> None:
        for dim_name, dim, block_name, block, align in (
            ("M", m, "block_m", self.block_m, 8),
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


CONFIG = MatmulConfig()


def _gemm_add_relu_kernel(x_ref, w_ref, b_ref, o_ref, acc_ref, *, k_steps: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]  # [block_m, block_k] bf16
    w = w_ref[...]  # [block_k, block_n] bf16
    acc_ref[...] += jnp.dot(x, w, preferred_element_type=jnp.float32)  # [block_m, block_n] f32

    @pl.when(k == k_steps - 1)
    def _epilogue():
        y = acc_ref[...].astype(o_ref.dtype)  # [block_m, block_n]: the dot's one bf16 rounding
        y = y + b_ref[...]  # [1, block_n] bias broadcast over rows, a bf16 add as in the graph
        o_ref[...] = jnp.maximum(y, jnp.zeros_like(y))


def gemm_add_relu(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array,
    *,
    config: MatmulConfig = CONFIG,
    interpret: bool | object = False,
) -> jax.Array:
    """relu(x @ weight + bias). x: [M, K], weight: [K, N], bias: [N] -> [M, N] in x's dtype."""
    m, k = x.shape
    k2, n = weight.shape
    if k != k2 or bias.shape != (n,):
        raise ValueError(f"shapes do not chain: x {x.shape}, weight {weight.shape}, bias {bias.shape}")
    cfg = config.clamped(m, k, n)
    cfg.validate(m, k, n)
    bm, bk, bn = cfg.block_m, cfg.block_k, cfg.block_n
    grid = (m // bm, n // bn, k // bk)

    # x is (m, k): load the [bm, bk] tile of this m-tile at k-step kk
    def x_index_map(i, j, kk):
        return i, kk

    # weight is (k, n): load the [bk, bn] tile of this n-tile at k-step kk
    def w_index_map(i, j, kk):
        return kk, j

    # bias is (1, n): the [1, bn] slice of this n-tile (fetched again only when j changes)
    def b_index_map(i, j, kk):
        return 0, j

    # out is (m, n): the (i, j) tile stays resident across the k axis and is written back once
    def o_index_map(i, j, kk):
        return i, j

    itemsize = x.dtype.itemsize
    cost = pl.CostEstimate(
        flops=2 * m * n * k + 2 * m * n,
        transcendentals=0,
        # HBM traffic of this tiling: x is re-read per n-tile, weight per m-tile, out written once.
        bytes_accessed=itemsize * (m * k * grid[1] + k * n * grid[0] + m * n + n),
    )
    return pl.pallas_call(
        functools.partial(_gemm_add_relu_kernel, k_steps=grid[2]),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec((bm, bk), x_index_map),
            pl.BlockSpec((bk, bn), w_index_map),
            pl.BlockSpec((1, bn), b_index_map),
        ],
        out_specs=pl.BlockSpec((bm, bn), o_index_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=cfg.vmem_limit_bytes,
        ),
        cost_estimate=cost,
        interpret=interpret,
        name="gemm_add_relu_41k",
    )(x, weight, bias.reshape(1, n))


def workload(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    """Same signature as the 41k task's workload."""
    return gemm_add_relu(x, weight, bias, config=CONFIG, interpret=False)
