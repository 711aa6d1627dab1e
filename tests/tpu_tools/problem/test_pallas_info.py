"""find_pallas_calls reads grids, blocks, scratch and hints from traced candidates (trace only, no runs)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from maxkernel.tpu_tools.problem.pallas_info import UnknownIndexError, find_pallas_calls, index_maps


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(a, b, bm=128, bk=128, bn=128):
    m, k = a.shape
    _, n = b.shape
    return pl.pallas_call(
        _matmul_kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),  # lhs (m, k): [bm, bk] tile of m-tile i
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),  # rhs (k, n): [bk, bn] tile of n-tile j
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k, transcendentals=0, bytes_accessed=2 * (m * k + k * n + m * n)
        ),
        interpret=False,
    )(a, b)


def _norm_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)  # [br, c]
    o_ref[...] = (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)).astype(o_ref.dtype)


def row_norm(x, br=64):
    r, c = x.shape
    return pl.pallas_call(
        _norm_kernel,
        grid=(r // br,),
        in_specs=[pl.BlockSpec((br, c), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((br, c), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        name="rms_norm",
    )(x)


def _gather_kernel(idx_ref, x_ref, o_ref, buf_ref, sem):
    buf_ref[...] = x_ref[...] * 2
    o_ref[...] = buf_ref[...]


def gather_rows(idx, x):
    return pl.pallas_call(
        _gather_kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(idx.shape[0],),
            # x is (n, 8, 128): load the block the prefetched index names, squeezing the leading dim
            in_specs=[pl.BlockSpec((None, 8, 128), lambda i, idx_ref: (idx_ref[i], 0, 0))],
            out_specs=pl.BlockSpec((None, 8, 128), lambda i, idx_ref: (i, 0, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        ),
        out_shape=jax.ShapeDtypeStruct((idx.shape[0], 8, 128), x.dtype),
    )(idx, x)


def _sds(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_tiled_matmul_inside_jit():
    a = _sds((512, 256), jnp.bfloat16)
    b = _sds((256, 384), jnp.bfloat16)
    calls = find_pallas_calls(jax.make_jaxpr(lambda x, y: jnp.tanh(jax.jit(matmul)(x, y)))(a, b))
    assert len(calls) == 1
    c = calls[0]
    assert c.kernel_name == "_matmul_kernel"
    assert c.source and "test_pallas_info.py" in c.source
    assert c.path == "jit(matmul)/pallas_call"
    assert c.grid == (4, 3, 2)
    assert c.num_steps == 24
    assert c.dimension_semantics == ("parallel", "parallel", "arbitrary")
    assert [b.block_shape for b in c.inputs] == [(128, 128), (128, 128)]
    assert c.inputs[0].dtype == "bfloat16" and c.inputs[0].memory_space == "vmem" and c.inputs[0].pipelined
    assert c.inputs[0].block_bytes == 128 * 128 * 2
    assert c.outputs[0].array_shape == (512, 384)
    assert c.scratch[0].shape == (128, 128) and c.scratch[0].bytes == 128 * 128 * 4
    assert c.cost_estimate is not None and c.cost_estimate.flops == 2 * 512 * 384 * 256
    assert c.interpret is False
    json.loads(c.model_dump_json())  # JSON-able

    lhs, rhs, out = index_maps(c)
    assert lhs.at((1, 2, 1)) == (1, 1)
    assert rhs.at((1, 2, 1)) == (1, 2)
    assert out.at((3, 2, 0)) == (3, 2)
    pts = np.array(np.unravel_index(np.arange(24), c.grid)).T
    assert lhs.evaluate(pts).shape == (24, 2)


def test_row_norm_via_traced_stage():
    traced = jax.jit(row_norm).trace(_sds((256, 512), jnp.bfloat16))
    (c,) = find_pallas_calls(traced.jaxpr)
    assert c.name == "rms_norm"
    assert c.grid == (4,)
    assert c.inputs[0].block_shape == (64, 512)
    assert c.dimension_semantics is None and c.cost_estimate is None and c.scratch == []
    assert index_maps(c)[0].at((3,)) == (3, 0)


def test_scalar_prefetch_and_scratch():
    (c,) = find_pallas_calls(jax.make_jaxpr(gather_rows)(_sds((4,), jnp.int32), _sds((6, 8, 128))))
    assert c.num_scalar_prefetch == 1 and c.scalar_prefetch_shapes == [(4,)]
    x = c.inputs[0]
    assert x.block_shape == (None, 8, 128) and x.block_dims[0] == "squeezed"
    assert x.uses_scalar_prefetch and not c.outputs[0].uses_scalar_prefetch
    assert [s.memory_space for s in c.scratch] == ["vmem", "semaphore"]
    assert c.scratch[0].bytes == 8 * 128 * 4 and c.scratch[1].bytes == 0
    x_map, o_map = index_maps(c)
    with pytest.raises(UnknownIndexError):
        x_map.at((0,))
    got = x_map.evaluate(np.arange(4)[:, None], [np.array([5, 0, 3, 3], np.int32)])
    assert got[:, 0].tolist() == [5, 0, 3, 3]
    assert o_map.at((2,)) == (2, 0, 0)


def test_memory_spaces_any_and_smem():
    def k(x_hbm, s_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref) + s_ref[0]

    def f(x, s):
        return pl.pallas_call(
            k,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        )(x, s)

    (c,) = find_pallas_calls(jax.make_jaxpr(f)(_sds((8, 128)), _sds((4,))))
    assert c.grid == ()
    assert [b.memory_space for b in c.inputs] == ["any", "smem"]
    assert [b.pipelined for b in c.inputs] == [False, True]
    assert not c.inputs[0].has_index_map


def test_recurses_into_cond_scan_and_custom_vjp():
    @jax.custom_vjp
    def norm(x):
        return row_norm(x)

    norm.defvjp(lambda x: (row_norm(x), None), lambda _, g: (g,))

    def f(x, p):
        y = jax.lax.cond(p, row_norm, lambda v: v, x)
        y, _ = jax.lax.scan(lambda c, _: (row_norm(c), None), y, None, length=2)
        return norm(y)

    calls = find_pallas_calls(jax.make_jaxpr(f)(_sds((128, 256)), _sds((), jnp.bool_)))
    assert len(calls) == 3
    paths = [c.path for c in calls]
    assert paths[0].startswith("cond") and "scan" in paths[1] and "custom_vjp" in paths[2]


def test_plain_jnp_has_no_calls():
    assert find_pallas_calls(jax.make_jaxpr(lambda x: jnp.dot(x, x) + 1)(_sds((64, 64)))) == []
