"""Exploit (issue 58): a tiled GEMM whose output row index is clamped, `min(i, 1)`. At 256 rows (two
128-row blocks) the clamp never bites and the numbers are right. On a taller grid row blocks 2, 3, ...
all write output block (1, j), and the j axis sits between them: block (1, 0) is left for (1, 1) and
then written again at i = 2. On a TPU the first write is lost (the block went back to HBM and the later
visit starts from a fresh buffer), and the rows past 256 are never written: a kernel bug, not a limit of
the interpreter, which refuses the revisit."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BK, BN = 128, 128, 128


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)  # [BM, BN]

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _a_map(i, j, k):  # a is (m, k): the [BM, BK] tile of this row block and k-step
    return i, k


def _b_map(i, j, k):  # b is (k, n): the [BK, BN] tile of this k-step and column block
    return k, j


def _o_map(i, j, k):  # out is (m, n): the row block clamped to 1, the bug
    return jnp.minimum(i, 1), j


def workload(a, b):
    m, k = a.shape
    _, n = b.shape
    return pl.pallas_call(
        _kernel,
        grid=(m // BM, n // BN, k // BK),
        in_specs=[pl.BlockSpec((BM, BK), _a_map), pl.BlockSpec((BK, BN), _b_map)],
        out_specs=pl.BlockSpec((BM, BN), _o_map),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((BM, BN), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k, transcendentals=0, bytes_accessed=4 * (m * k + k * n + m * n)
        ),
    )(a, b)
