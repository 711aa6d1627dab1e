"""A level-2-style Pallas GEMM of our own at a Llama-3.1-70B projection's shape (JaxBench 8p's): CONFIG,
TUNED_PARAMS, create_inputs(dtype) and workload, as upstream level 2 writes its baselines."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG = {"name": "gemm_l2", "model": "test", "operator": "gemm", "M": 8192, "K": 8192, "N": 28672}
TUNED_PARAMS = {"block_m": 512, "block_n": 1024, "block_k": 1024}


def _kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(x, y, bm, bn, bk):
    m, k = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),  # x: the (i, k) tile
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),  # y: the (k, j) tile
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


def create_inputs(dtype=jnp.bfloat16):
    k1, k2 = jax.random.split(jax.random.key(3))
    x = jax.random.normal(k1, (CONFIG["M"], CONFIG["K"]), dtype=dtype)
    y = jax.random.normal(k2, (CONFIG["K"], CONFIG["N"]), dtype=dtype) * 0.02
    return x, y


def workload(x, y):
    return matmul(x, y, TUNED_PARAMS["block_m"], TUNED_PARAMS["block_n"], TUNED_PARAMS["block_k"])
