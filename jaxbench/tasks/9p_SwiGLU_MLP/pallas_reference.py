"""Expert Pallas TPU reference for 9p SwiGLU MLP: (silu(x Wg) * (x Wu)) Wd, bf16 with f32 accumulation.

Two tiled matmul kernels. The first reads each [bt, be] tile of x once for both projections: two f32
VMEM accumulators (gate and up) fill over the emb axis, and on the last step the SwiGLU epilogue
(round each to bf16 as the task's matmuls do, silu, product) writes the [bt, bf] tile of h in bf16.
The second is a plain tiled h @ Wd. h makes one HBM round trip (~0.9 GB at full size, ~0.6 ms on
v6e) in exchange for matmul tiles large enough to be compute-bound; fusing the down projection too
would need the [bt, E] f32 output resident, which at E = 8192 forces small token tiles and makes
the weights stream from HBM once per tile. Self-contained (jax only).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Tunables (v6e). Gate/up: 1024x1024 tiles of two matmuls sharing x, 2·bt·bf/(bt+2bf) ~ 680 flop/byte.
# Down: 1024x2048 output tiles, ~680 flop/byte. Both above the v6e ridge (~560), ~24-28 MiB of VMEM.
BLOCK_T = 1024  # token rows per tile, both kernels
BLOCK_F = 1024  # mlp columns of h per tile (gate/up), and the down kernel's contraction chunk
BLOCK_E = 1024  # emb contraction chunk of the gate/up kernel
BLOCK_N = 2048  # emb output columns per tile of the down kernel
VMEM_LIMIT_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class SwiGLUConfig:
    """Tile sizes of both kernels; hashable so it can key a cache or a search node."""

    block_t: int = BLOCK_T
    block_f: int = BLOCK_F
    block_e: int = BLOCK_E
    block_n: int = BLOCK_N
    vmem_limit_bytes: int | None = VMEM_LIMIT_BYTES

    def clamped(self, t: int, e: int, f: int) -> "SwiGLUConfig":
        """The same config with each block shrunk to the problem dim (small sizes reuse the file)."""
        return dataclasses.replace(
            self,
            block_t=min(self.block_t, t),
            block_f=min(self.block_f, f),
            block_e=min(self.block_e, e),
            block_n=min(self.block_n, e),
        )

    def validate(self, t: int, e: int, f: int) -> None:
        for dim_name, dim, block_name, block, align in (
            ("tokens", t, "block_t", self.block_t, 8),
            ("mlp_dim", f, "block_f", self.block_f, 128),
            ("emb_dim", e, "block_e", self.block_e, 128),
            ("emb_dim", e, "block_n", self.block_n, 128),
        ):
            if block <= 0:
                raise ValueError(f"{block_name}={block} should be positive")
            if dim % block:
                raise ValueError(f"{dim_name}={dim} should be divisible by {block_name}={block}")
            if block != dim and block % align:
                raise ValueError(
                    f"{block_name}={block} should be a multiple of {align} (or equal {dim_name}={dim})"
                )


CONFIG = SwiGLUConfig()


def _gate_up_kernel(x_ref, wg_ref, wu_ref, h_ref, gate_acc, up_acc, *, k_steps: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        gate_acc[...] = jnp.zeros_like(gate_acc)
        up_acc[...] = jnp.zeros_like(up_acc)

    x = x_ref[...]  # [block_t, block_e] bf16, read once for both projections
    gate_acc[...] += jnp.dot(x, wg_ref[...], preferred_element_type=jnp.float32)  # [block_t, block_f]
    up_acc[...] += jnp.dot(x, wu_ref[...], preferred_element_type=jnp.float32)  # [block_t, block_f]

    @pl.when(k == k_steps - 1)
    def _epilogue():
        dtype = h_ref.dtype
        g = gate_acc[...].astype(dtype).astype(jnp.float32)  # [block_t, block_f]: x @ Wg rounded as the task
        u = up_acc[...].astype(dtype)  # [block_t, block_f]: x @ Wu rounded as the task
        silu = (g * jax.nn.sigmoid(g)).astype(dtype)  # f32 math, one rounding (the task: bf16 ops)
        h_ref[...] = silu * u  # bf16 product, as the task


def _down_kernel(h_ref, wd_ref, o_ref, acc_ref, *, k_steps: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    h = h_ref[...]  # [block_t, block_f] bf16
    acc_ref[...] += jnp.dot(h, wd_ref[...], preferred_element_type=jnp.float32)  # [block_t, block_n]

    @pl.when(k == k_steps - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _gate_up(x, wg, wu, cfg: SwiGLUConfig, interpret):
    t, e = x.shape
    f = wg.shape[1]
    bt, bf, be = cfg.block_t, cfg.block_f, cfg.block_e
    grid = (t // bt, f // bf, e // be)

    # x is (t, e): the [bt, be] tile of token tile i at emb step kk
    def x_index_map(i, j, kk):
        return i, kk

    # gate and up weights are (e, f): the [be, bf] tile of mlp tile j at emb step kk
    def w_index_map(i, j, kk):
        return kk, j

    # h is (t, f): tile (i, j) stays resident across the emb axis, written once
    def h_index_map(i, j, kk):
        return i, j

    itemsize = x.dtype.itemsize
    cost = pl.CostEstimate(
        flops=4 * t * e * f + 4 * t * f,
        transcendentals=t * f,
        bytes_accessed=itemsize * (t * e * grid[1] + 2 * e * f * grid[0] + t * f),
    )
    w_spec = pl.BlockSpec((be, bf), w_index_map)
    return pl.pallas_call(
        functools.partial(_gate_up_kernel, k_steps=grid[2]),
        out_shape=jax.ShapeDtypeStruct((t, f), x.dtype),
        grid=grid,
        in_specs=[pl.BlockSpec((bt, be), x_index_map), w_spec, w_spec],
        out_specs=pl.BlockSpec((bt, bf), h_index_map),
        scratch_shapes=[pltpu.VMEM((bt, bf), jnp.float32), pltpu.VMEM((bt, bf), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=cfg.vmem_limit_bytes,
        ),
        cost_estimate=cost,
        interpret=interpret,
        name="swiglu_gate_up_9p",
    )(x, wg, wu)


def _down(h, wd, cfg: SwiGLUConfig, interpret):
    t, f = h.shape
    e = wd.shape[1]
    bt, bf, bn = cfg.block_t, cfg.block_f, cfg.block_n
    grid = (t // bt, e // bn, f // bf)

    # h is (t, f): the [bt, bf] tile of token tile i at mlp step kk
    def h_index_map(i, j, kk):
        return i, kk

    # down weight is (f, e): the [bf, bn] tile of emb tile j at mlp step kk
    def wd_index_map(i, j, kk):
        return kk, j

    # out is (t, e): tile (i, j) stays resident across the mlp axis, written once
    def o_index_map(i, j, kk):
        return i, j

    itemsize = h.dtype.itemsize
    cost = pl.CostEstimate(
        flops=2 * t * f * e,
        transcendentals=0,
        bytes_accessed=itemsize * (t * f * grid[1] + f * e * grid[0] + t * e),
    )
    return pl.pallas_call(
        functools.partial(_down_kernel, k_steps=grid[2]),
        out_shape=jax.ShapeDtypeStruct((t, e), h.dtype),
        grid=grid,
        in_specs=[pl.BlockSpec((bt, bf), h_index_map), pl.BlockSpec((bf, bn), wd_index_map)],
        out_specs=pl.BlockSpec((bt, bn), o_index_map),
        scratch_shapes=[pltpu.VMEM((bt, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=cfg.vmem_limit_bytes,
        ),
        cost_estimate=cost,
        interpret=interpret,
        name="swiglu_down_9p",
    )(h, wd)


def swiglu_mlp(
    x: jax.Array,
    gate_kernel: jax.Array,
    up_kernel: jax.Array,
    down_kernel: jax.Array,
    *,
    config: SwiGLUConfig = CONFIG,
    interpret: bool | object = False,
) -> jax.Array:
    """(silu(x Wg) * (x Wu)) Wd. x: [B, S, E], Wg/Wu: [E, F], Wd: [F, E] -> [B, S, E] in x's dtype."""
    b, s, e = x.shape
    f = gate_kernel.shape[1]
    if gate_kernel.shape != (e, f) or up_kernel.shape != (e, f) or down_kernel.shape != (f, e):
        raise ValueError(
            f"shapes do not chain: x {x.shape}, gate {gate_kernel.shape}, up {up_kernel.shape}, "
            f"down {down_kernel.shape}"
        )
    t = b * s
    cfg = config.clamped(t, e, f)
    cfg.validate(t, e, f)
    x2 = x.reshape(t, e)  # [T, E]: tokens are independent rows
    h = _gate_up(x2, gate_kernel, up_kernel, cfg, interpret)  # [T, F] bf16
    return _down(h, down_kernel, cfg, interpret).reshape(b, s, e)


def workload(x, gate_kernel, up_kernel, down_kernel) -> jax.Array:
    """Same signature as the 9p task's workload."""
    return swiglu_mlp(x, gate_kernel, up_kernel, down_kernel, config=CONFIG, interpret=False)
