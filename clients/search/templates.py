"""Concrete config spaces for two tasks (8p_GEMM, 12p_RMSNorm): tunables -> a complete Pallas module.

The search needs a space a proposer can walk without a language model: for tests, for the offline
path, and for the efficiency benchmark (exhaustive sweep vs each algorithm). Every rendered module
carries its config as a `# maxkernel-config: {json}` line, so any proposer (the offline model too)
can read back what a parent was made of.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from maxkernel.clients.search.strategies import Config

CONFIG_TAG = "# maxkernel-config: "


def config_line(config: Config) -> str:
    return CONFIG_TAG + json.dumps(config, sort_keys=True)


def read_config(source: str) -> Config | None:
    m = re.search(r"^# maxkernel-config: (\{.*\})$", source, re.M)
    return json.loads(m.group(1)) if m else None


@dataclass(frozen=True)
class TemplateSpace:
    task: str
    space: dict[str, list[Any]]
    initial: Config
    render: Callable[[Config], str]
    allowed: Callable[[Config], bool]

    def configs(self) -> Iterator[Config]:
        keys = list(self.space)
        for values in itertools.product(*(self.space[k] for k in keys)):
            c = dict(zip(keys, values, strict=True))
            if self.allowed(c):
                yield c


_GEMM = '''"""8p GEMM as a tiled Pallas TPU matmul with an f32 VMEM accumulator.

Shape-generic: blocks were chosen for the target size and clamp to smaller inputs; partial row and column
blocks are dropped on store, and a partial last K block is masked (its lhs columns and rhs rows past K
are zeroed), so any M, N, K computes the full product.
"""
{tag}
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BN, BK = {block_m}, {block_n}, {block_k}
BUFFERS = {buffer_count}
VMEM_LIMIT_BYTES = 48 * 1024 * 1024  # the largest blocks need more than v6e's 32 MiB default; 7x has 64


def _kernel(a_ref, b_ref, o_ref, acc_ref, *, k_total):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a, b = a_ref[...], b_ref[...]
    bk = a.shape[1]
    if k_total % bk:  # the last K block runs past K: zero what lies beyond it on both sides
        left = k_total - k * bk
        a = jnp.where(lax.broadcasted_iota(jnp.int32, a.shape, 1) < left, a, jnp.zeros_like(a))
        b = jnp.where(lax.broadcasted_iota(jnp.int32, b.shape, 0) < left, b, jnp.zeros_like(b))
    acc_ref[...] += jnp.dot(a, b, preferred_element_type=jnp.float32)  # [bm, bn]

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _spec(shape, index_map):
    mode = pl.Buffered(BUFFERS) if BUFFERS != 2 else None
    return pl.BlockSpec(shape, index_map, pipeline_mode=mode)


def workload(a, b):
    m, kk = a.shape
    n = b.shape[1]
    bm, bn, bk = min(BM, m), min(BN, n), min(BK, kk)
{grid_body}
    return pl.pallas_call(
        functools.partial(_kernel, k_total=kk),
        grid=grid,
        in_specs=[a_spec, b_spec],
        out_specs=o_spec,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("{sem}", "{sem}", "arbitrary"), vmem_limit_bytes=VMEM_LIMIT_BYTES
        ),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * kk, transcendentals=0, bytes_accessed=(m * kk + kk * n + m * n) * a.dtype.itemsize
        ),
        interpret=False,
    )(a, b)
'''

_GRID_MN = """    grid = (pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(kk, bk))
    a_spec = _spec((bm, bk), lambda i, j, k: (i, k))  # lhs [bm, bk] for this m-tile
    b_spec = _spec((bk, bn), lambda i, j, k: (k, j))  # rhs [bk, bn] for this n-tile
    o_spec = pl.BlockSpec((bm, bn), lambda i, j, k: (i, j))"""

_GRID_NM = """    grid = (pl.cdiv(n, bn), pl.cdiv(m, bm), pl.cdiv(kk, bk))
    a_spec = _spec((bm, bk), lambda j, i, k: (i, k))  # lhs [bm, bk] for this m-tile
    b_spec = _spec((bk, bn), lambda j, i, k: (k, j))  # rhs [bk, bn] stays while i moves
    o_spec = pl.BlockSpec((bm, bn), lambda j, i, k: (i, j))"""


def render_gemm(c: Config) -> str:
    grid = _GRID_MN if c["grid_order"] == "mnk" else _GRID_NM
    return _GEMM.format(tag=config_line(c), grid_body=grid, sem=c["semantics"], **c)


_RMS = '''"""12p RMSNorm as a row-blocked Pallas TPU kernel (f32 statistics, bf16 rounding as the reference)."""
{tag}
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS = {block_rows}  # chosen for the target size; clamps to fewer rows, a partial last block is dropped on store
BUFFERS = {buffer_count}
EPS = 1e-5
VMEM_LIMIT_BYTES = 48 * 1024 * 1024


def _kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)  # [..., BLOCK_ROWS, D]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    normed = x * jax.lax.rsqrt(ms + EPS)
    s = s_ref[...]  # [1, D]
    o_ref[...] = (normed.astype(s.dtype) * s).astype(o_ref.dtype)


def workload(x, scale):
    mode = pl.Buffered(BUFFERS) if BUFFERS != 2 else None
    d = x.shape[-1]
{body}
'''

_RMS_FLAT = """    rows = x.size // d
    br = min(BLOCK_ROWS, rows)
    x2 = x.reshape(rows, d)  # leading axes flattened: [rows, D]
    out = pl.pallas_call(
        _kernel,
        grid=(pl.cdiv(rows, br),),
        in_specs=[
            pl.BlockSpec((br, d), lambda i: (i, 0), pipeline_mode=mode),  # this row slab
            pl.BlockSpec((1, d), lambda i: (0, 0)),  # scale, resident
        ],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("{sem}",), vmem_limit_bytes=VMEM_LIMIT_BYTES),
        interpret=False,
    )(x2, scale.reshape(1, d))
    return out.reshape(x.shape)"""

_RMS_3D = """    b, s = x.shape[0], x.shape[1]
    br = min(BLOCK_ROWS, s)
    return pl.pallas_call(
        _kernel,
        grid=(b, pl.cdiv(s, br)),
        in_specs=[
            pl.BlockSpec((1, br, d), lambda i, j: (i, j, 0), pipeline_mode=mode),  # [1, rows, D]
            pl.BlockSpec((1, d), lambda i, j: (0, 0)),  # scale, resident
        ],
        out_specs=pl.BlockSpec((1, br, d), lambda i, j: (i, j, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("{sem}", "{sem}"), vmem_limit_bytes=VMEM_LIMIT_BYTES),
        interpret=False,
    )(x, scale.reshape(1, d))"""


def render_rmsnorm(c: Config) -> str:
    body = (_RMS_FLAT if c["layout"] == "flat" else _RMS_3D).replace("{sem}", c["semantics"])
    return _RMS.format(tag=config_line(c), body=body, **{k: v for k, v in c.items() if k != "semantics"})


# Spaces for the production size (8p: M=8192, K=8192, N=28672; 12p: x [8, 4096, 8192]): a search ranks at
# the target size, so its blocks are the target's; the kernels clamp them at the check sizes.
GEMM = TemplateSpace(
    task="8p_GEMM",
    space={
        "block_m": [128, 256, 512, 1024],
        "block_n": [256, 512, 1024, 2048],
        "block_k": [256, 512, 1024],
        "grid_order": ["mnk", "nmk"],
        "buffer_count": [1, 2],  # this jax lowers single and double buffering only
        "semantics": ["parallel", "arbitrary"],
    },
    initial={
        "block_m": 512,
        "block_n": 1024,
        "block_k": 512,
        "grid_order": "mnk",
        "buffer_count": 2,
        "semantics": "parallel",
    },
    render=render_gemm,
    allowed=lambda c: True,
)

RMSNORM = TemplateSpace(
    task="12p_RMSNorm",
    space={
        "block_rows": [16, 32, 64, 128, 256, 512],
        "layout": ["flat", "3d"],
        "buffer_count": [1, 2],  # this jax lowers single and double buffering only
        "semantics": ["parallel", "arbitrary"],
    },
    initial={"block_rows": 256, "layout": "3d", "buffer_count": 2, "semantics": "parallel"},
    render=render_rmsnorm,
    allowed=lambda c: True,
)

SPACES = {s.task: s for s in (GEMM, RMSNORM)}


def offline_space(task: str) -> TemplateSpace | None:
    """The offline model's template for `task` at its production size, as a space (None if it has none).

    The template the Auto loop writes from the traced program (matmul with its epilogue, flash, the
    gated MLP...) where there is one, else the operator template (whole blocks, the older family)."""
    return _program_space(task) or _operator_space(task)


def _program_space(task: str) -> TemplateSpace | None:
    try:
        from maxkernel.clients.offline.model import program_template
        from maxkernel.jaxbench.registry import resolve_id
        from maxkernel.tpu_tools.problem.program import describe

        tid = resolve_id(task)
        tpl, _, dims = program_template(describe(tid).model_dump(mode="json"))
    except Exception:  # noqa: BLE001 - no program template: the operator template answers
        return None
    return TemplateSpace(
        task=tid,
        space=tpl.space([dims]),
        initial=dict(tpl.initial),
        render=lambda c: tpl.render(c, "program"),
        allowed=lambda c: not tpl.check(c, dims),
    )


def _operator_space(task: str) -> TemplateSpace | None:
    try:
        from maxkernel.clients.offline.templates import operator_of, template_for
        from maxkernel.jaxbench.registry import load_task, resolve_id
        from maxkernel.tpu_tools.problem.reference import load_reference

        tid = resolve_id(task)
        tpl, op = template_for(tid), operator_of(tid)
        module = load_task(tid)
        dims = tpl.dims_of(module.SIZES[load_reference(tid).default_size()[0]])
    except Exception:
        return None
    space = tpl.space([dims])
    return TemplateSpace(
        task=tid,
        space=space,
        initial=dict(tpl.initial),
        render=lambda c: tpl.render(c, op),
        allowed=lambda c: not tpl.check(c, dims),
    )


def space_for(task: str) -> TemplateSpace | None:
    """This module's space for the task if it has one, else the offline model's template."""
    try:
        from maxkernel.jaxbench.registry import resolve_id

        tid = resolve_id(task)
    except Exception:
        return None
    return SPACES.get(tid) or offline_space(tid)
