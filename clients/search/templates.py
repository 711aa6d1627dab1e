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


_GEMM = '''"""8p GEMM as a tiled Pallas TPU matmul with an f32 VMEM accumulator."""
{tag}
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BN, BK = {block_m}, {block_n}, {block_k}
BUFFERS = {buffer_count}


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)  # [BM, BN]

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _spec(shape, index_map):
    mode = pl.Buffered(BUFFERS) if BUFFERS != 2 else None
    return pl.BlockSpec(shape, index_map, pipeline_mode=mode)


def workload(a, b):
    m, kk = a.shape
    n = b.shape[1]
{grid_body}
    return pl.pallas_call(
        _kernel,
        grid=grid,
        in_specs=[a_spec, b_spec],
        out_specs=o_spec,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((BM, BN), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("{sem}", "{sem}", "arbitrary")),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * kk, transcendentals=0, bytes_accessed=(m * kk + kk * n + m * n) * a.dtype.itemsize
        ),
        interpret=False,
    )(a, b)
'''

_GRID_MN = """    grid = (m // BM, n // BN, kk // BK)
    a_spec = _spec((BM, BK), lambda i, j, k: (i, k))  # lhs [BM, BK] for this m-tile
    b_spec = _spec((BK, BN), lambda i, j, k: (k, j))  # rhs [BK, BN] for this n-tile
    o_spec = pl.BlockSpec((BM, BN), lambda i, j, k: (i, j))"""

_GRID_NM = """    grid = (n // BN, m // BM, kk // BK)
    a_spec = _spec((BM, BK), lambda j, i, k: (i, k))  # lhs [BM, BK] for this m-tile
    b_spec = _spec((BK, BN), lambda j, i, k: (k, j))  # rhs [BK, BN] stays while i moves
    o_spec = pl.BlockSpec((BM, BN), lambda j, i, k: (i, j))"""


def render_gemm(c: Config) -> str:
    grid = _GRID_MN if c["grid_order"] == "mnk" else _GRID_NM
    return _GEMM.format(tag=config_line(c), grid_body=grid, sem=c["semantics"], **c)


_RMS = '''"""12p RMSNorm as a row-blocked Pallas TPU kernel (f32 statistics, bf16 rounding as the reference)."""
{tag}
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_ROWS = {block_rows}
BUFFERS = {buffer_count}
EPS = 1e-5


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
    x2 = x.reshape(rows, d)  # leading axes flattened: [rows, D]
    out = pl.pallas_call(
        _kernel,
        grid=(rows // BLOCK_ROWS,),
        in_specs=[
            pl.BlockSpec((BLOCK_ROWS, d), lambda i: (i, 0), pipeline_mode=mode),  # this row slab
            pl.BlockSpec((1, d), lambda i: (0, 0)),  # scale, resident
        ],
        out_specs=pl.BlockSpec((BLOCK_ROWS, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, d), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("{sem}",)),
        interpret=False,
    )(x2, scale.reshape(1, d))
    return out.reshape(x.shape)"""

_RMS_3D = """    b, s = x.shape[0], x.shape[1]
    return pl.pallas_call(
        _kernel,
        grid=(b, s // BLOCK_ROWS),
        in_specs=[
            pl.BlockSpec((1, BLOCK_ROWS, d), lambda i, j: (i, j, 0), pipeline_mode=mode),  # [1, rows, D]
            pl.BlockSpec((1, d), lambda i, j: (0, 0)),  # scale, resident
        ],
        out_specs=pl.BlockSpec((1, BLOCK_ROWS, d), lambda i, j: (i, j, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("{sem}", "{sem}")),
        interpret=False,
    )(x, scale.reshape(1, d))"""


def render_rmsnorm(c: Config) -> str:
    body = (_RMS_FLAT if c["layout"] == "flat" else _RMS_3D).replace("{sem}", c["semantics"])
    return _RMS.format(tag=config_line(c), body=body, **{k: v for k, v in c.items() if k != "semantics"})


# Small sizes: GEMM M=256, K=256, N=896; RMSNorm x [2, 128, 1024].
GEMM = TemplateSpace(
    task="8p_GEMM",
    space={
        "block_m": [8, 16, 32, 64, 128, 256],
        "block_n": [128, 896],
        "block_k": [128, 256],
        "grid_order": ["mnk", "nmk"],
        "buffer_count": [2, 3],
        "semantics": ["parallel", "arbitrary"],
    },
    initial={
        "block_m": 16,
        "block_n": 128,
        "block_k": 128,
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
        "block_rows": [8, 16, 32, 64, 128, 256],
        "layout": ["flat", "3d"],
        "buffer_count": [2, 3],
        "semantics": ["parallel", "arbitrary"],
    },
    initial={"block_rows": 8, "layout": "3d", "buffer_count": 2, "semantics": "parallel"},
    render=render_rmsnorm,
    allowed=lambda c: c["layout"] == "flat" or c["block_rows"] <= 128,
)

SPACES = {s.task: s for s in (GEMM, RMSNORM)}


def offline_space(task: str) -> TemplateSpace | None:
    """The offline model's template for `task` at its small size, as a space (None if it has none)."""
    try:
        from maxkernel.clients.offline.templates import operator_of, template_for
        from maxkernel.jaxbench.registry import load_task, resolve_id

        tid = resolve_id(task)
        tpl, op = template_for(tid), operator_of(tid)
        module = load_task(tid)
        dims = tpl.dims_of(module.SIZES["small"])
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
