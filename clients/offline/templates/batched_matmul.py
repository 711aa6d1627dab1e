"""A (batched) matmul from a traced program, tiled on M, N and K: no operand is held whole.

The row-tiled `matmul` class keeps the right operand whole per row block (14p_Ragged_Dot at full: a
4096 x 14336 weight per group, VMEM exhausted). This serves a program that is one dot_general of two
inputs sharing leading batch axes ([B..., M, K] x [B..., K, N] or [B..., N, K]), whose result is the
output (casts aside): grid (batch, M blocks, N blocks, K blocks), K innermost and "arbitrary", an f32
accumulator in VMEM, a K tail masked to zeros. Anything else returns None.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.tile_cost import accumulator_us, flops_us
from maxkernel.tpu_tools.problem.emit import Program, dot_kind, mxu_dot_note, mxu_dot_source

SOURCE = '''"""Batched matmul (offline template `batched_matmul`), generated from the reference's traced program.

Grid (batch, M blocks, N blocks, K blocks), K innermost and "arbitrary": the f32 accumulator starts
as the first K step's product (no zero fill); the last K step adds its product and rounds the sum to the
reference's dtype in the same branch as its dot (overlapping the MXU's work), one store per block.
The dot runs as XLA runs the reference's on a TPU (`_mxu_dot`: ${dot_note}).

Shape-generic: every shape is read from the inputs when the kernel is traced; the blocks were chosen
for the target size (${target}) and clamp to smaller inputs. Partial M / N blocks only touch rows and
columns that the store drops; a last K step past K is masked to zeros on both operands.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_M = ${block_m}
BLOCK_N = ${block_n}
BLOCK_K = ${block_k}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
RHS_NK = ${rhs_nk}  # the right operand is [N, K] (else [K, N])


${mxu_dot}

def _kernel(lhs_ref, rhs_ref, o_ref, acc_ref, *, k_total, nk):
    kk = pl.program_id(3)

    def _part():  # this K step's partial product, [bm, bn] f32
        lhs, rhs = lhs_ref[...], rhs_ref[...]  # [bm, bk], [bn, bk] or [bk, bn]
        bk = lhs.shape[1]
        if k_total % bk:  # the last K step runs past K: zero both operands there (garbage * 0 may be NaN)
            left = k_total - kk * bk
            lhs = jnp.where(lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < left, lhs, jnp.zeros_like(lhs))
            rhs = jnp.where(lax.broadcasted_iota(jnp.int32, rhs.shape, 1 if RHS_NK else 0) < left, rhs, jnp.zeros_like(rhs))
        dims = (((1,), (1,)), ((), ())) if RHS_NK else (((1,), (0,)), ((), ()))
        return _mxu_dot(lhs, rhs, dims)

    if nk == 1:  # one K step: the sum is the one partial product
        o_ref[...] = _part().astype(o_ref.dtype)
        return

    @pl.when(kk < nk - 1)
    def _accumulate():  # the first k-step's product starts the sum (no zero fill); one dot in this branch
        acc = acc_ref[...]
        acc_ref[...] = jnp.where(kk == 0, jnp.zeros_like(acc), acc) + _part()

    @pl.when(kk == nk - 1)
    def _last():  # the rounding and store share the last dot's block: they overlap the MXU's work
        o_ref[...] = (acc_ref[...] + _part()).astype(o_ref.dtype)


def workload(${lhs}, ${rhs}):
    batch = ${lhs}.shape[:${nb}]
    lhs = ${lhs}.reshape((-1,) + ${lhs}.shape[${nb}:])  # [B, M, K]: the batch axes merged
    rhs = ${rhs}.reshape((-1,) + ${rhs}.shape[${nb}:])
    b, m, k_total = lhs.shape
    n = rhs.shape[1] if RHS_NK else rhs.shape[2]
    bm, bn, bk = min(BLOCK_M, m), min(BLOCK_N, n), min(BLOCK_K, k_total)

    def lhs_map(g, i, j, kk):
        return g, i, kk

    def rhs_map(g, i, j, kk):
        return (g, j, kk) if RHS_NK else (g, kk, j)

    def o_map(g, i, j, kk):
        return g, i, j

    sq = pl.Squeezed()
    out = pl.pallas_call(
        functools.partial(_kernel, k_total=k_total, nk=pl.cdiv(k_total, bk)),
        out_shape=jax.ShapeDtypeStruct((b, m, n), jnp.${out_dtype}),
        grid=(b, pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k_total, bk)),
        in_specs=[
            pl.BlockSpec((sq, bm, bk), lhs_map),
            pl.BlockSpec((sq, bn, bk) if RHS_NK else (sq, bk, bn), rhs_map),
        ],
        out_specs=pl.BlockSpec((sq, bm, bn), o_map),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        interpret=False,
        name="offline_batched_matmul",
    )(lhs, rhs)
    return out.reshape(batch + (m, n))
'''
BLOCKS = (128, 256, 512, 1024)
WIDE = (
    *BLOCKS,
    2048,
)  # n and k: 1024 x 2048 tiles sit above v6e's ridge, and fewer k steps store the accumulator less
# k: a whole K of 4096 is one k step, with no accumulator, and the left operand's block stays put across
# the n blocks, so it is read once (14p at full: 1024 x 1024 x 4096)
DEEP = (*WIDE, 4096)
PASS = {"convert_element_type"}


TALL = (
    *BLOCKS,
    2048,
)  # m: a whole 1536-row operand per block reads the right one once (17p's contraction: twice at 1024)


def block_problems(
    c: Mapping[str, Any],
    d: Mapping[str, int],
    wide: tuple[int, ...] = BLOCKS,
    deep: tuple[int, ...] | None = None,
    tall: tuple[int, ...] = BLOCKS,
) -> list[str]:
    """Why a (block_m, block_n, block_k) config is illegal: an m block not in `tall`, n not in `wide`, k
    not in `deep` (None: `wide`)."""
    return [
        f"{k}={c[k]} is not one of {list(allowed)}"
        for k, allowed in (("block_m", tall), ("block_n", wide), ("block_k", deep or wide))
        if c[k] not in allowed
    ]


def k_checkable(block_k: int, k: int, check_ks: Sequence[int] = (), strict: bool = False) -> bool:
    """One k step at the target, or at least 4, or a check size (K there in `check_ks`) that steps over K as
    often as the target does (up to 3: first, middle, last): the judge's check sizes grow K only as far as
    their element budget allows (14p: 2048 of the target's 4096), and a kernel whose k steps no check size
    repeats is `shape_specialized` (its accumulate-across-k path never ran). With 4 steps, half the target
    still has 2; 30k's check sizes keep the target's K=4096, so its 2 steps of 2048 run there too (and a
    whole program's K grown alone by the judge reaches the rest: 8p's 2048-deep blocks). `strict` (a stage
    of a cut program, `k_strict`): 4 or more steps still need a check size with 2, both ends of the k walk;
    the judge's grown sizes did not reach 3p's q_down (K 512 and 1024 at the check sizes, 7168 at full)."""
    if k <= 0 or block_k >= k:
        return True
    if k // block_k >= 4:
        return not strict or any(-(-kc // block_k) >= 2 for kc in check_ks)
    steps = min(-(-k // block_k), 3)
    return any(-(-kc // block_k) >= steps for kc in check_ks)


def k_strict(sym: Symbolic) -> bool:
    """Whether the program is a stage of a cut program (stages.attention_cut marks them `cut_stage`)."""
    return bool(sym.program.get("cut_stage"))


def check_ks(sym: Symbolic, names: Sequence[str], lhs: str) -> list[int]:
    """K (the left operand's last axis) at every traced size but the target: the sizes the judge checks at."""
    i = names.index(lhs)
    return [int(sym.at(s)["inputs"][i]["shape"][-1]) for s in sym.sizes if s != sym.target]


def first_proposal(
    vmem: Callable[..., int],
    cost: Callable[..., float],
    wide: tuple[int, ...] = BLOCKS,
    limit: int = 40 * MiB,
    k: int = 0,
    deep: tuple[int, ...] | None = None,
    tall: tuple[int, ...] = BLOCKS,
) -> dict[str, int]:
    """The cheapest (block_m, block_n, block_k) by `cost` at the target whose VMEM count stays under
    `limit` (40 MiB: an upper bound's rule, under every chip's kernel limit of 48 MiB or more; a count
    that is the compiler's own may take 48); m blocks from `tall`, n from `wide`, k from `deep` (None:
    `wide`)."""
    configs = [{"block_m": a, "block_n": b, "block_k": c} for a in tall for b in wide for c in deep or wide]
    fitting = [c for c in configs if vmem(c, {}) <= limit and k_checkable(c["block_k"], k)] or configs[:1]
    return min(fitting, key=lambda c: (cost(c, {}), -c["block_k"]))


def recognise(program: Program) -> dict[str, Any] | None:
    """The operands of a program that is one batched dot_general of two inputs, or None."""
    eqns, names = program["equations"], program["input_names"]
    if len(names) != 2 or not eqns or eqns[0]["primitive"] != "dot_general" or len(program["outputs"]) != 1:
        return None
    e = eqns[0]
    lhs, rhs = e["inputs"]
    if lhs not in names or rhs not in names or lhs == rhs:
        return None
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    nb = len(lb)
    lrank = len(program["inputs"][names.index(lhs)]["shape"])
    rrank = len(program["inputs"][names.index(rhs)]["shape"])
    if nb == 0 or tuple(lb) != tuple(range(nb)) or tuple(rb) != tuple(range(nb)):
        return None
    if lrank != nb + 2 or rrank != nb + 2 or tuple(lc) != (nb + 1,) or tuple(rc) not in ((nb,), (nb + 1,)):
        return None
    cur = e["outputs"][0]
    for t in eqns[1:]:  # casts only after the dot
        if t["primitive"] not in PASS or t["inputs"] != [cur]:
            return None
        cur = t["outputs"][0]
    if cur != program["outputs"][0]:
        return None
    return {"lhs": lhs, "rhs": rhs, "nb": nb, "rhs_nk": tuple(rc) == (nb + 1,),
            "out_dtype": program["out_specs"][0]["dtype"]}  # fmt: skip


def build(program: Program, sym: Symbolic) -> Template | None:
    r = recognise(program)
    if r is None:
        return None
    names = program["input_names"]
    at = sym.at(sym.target)
    ls = at["inputs"][names.index(r["lhs"])]["shape"]
    rs = at["inputs"][names.index(r["rhs"])]["shape"]
    nb = r["nb"]
    b_t, m_t, k_t = math.prod(ls[:nb]), ls[nb], ls[nb + 1]
    n_t = rs[nb] if r["rhs_nk"] else rs[nb + 1]
    item = 2 if "16" in at["inputs"][0]["dtype"] else 4
    out_item = 2 if "16" in r["out_dtype"] else 4
    kind = dot_kind(program, program["equations"][0])
    fixed = {
        "mxu_dot": mxu_dot_source(kind), "dot_note": mxu_dot_note(kind),
        "lhs": r["lhs"], "rhs": r["rhs"], "nb": str(nb), "rhs_nk": str(r["rhs_nk"]),
        "out_dtype": r["out_dtype"],
        "target": f"{sym.target}: B={b_t}, M={m_t}, K={k_t}, N={n_t}",
    }  # fmt: skip

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        """The pipelined blocks at their dtypes and the f32 accumulator: the compiler's scoped count (14p
        at 1024 x 2048 x 2048: 40.0 MiB here, 40.1 in `maxkernel analyze`)."""
        bm, bn, bk = (min(int(c[k]), x) for k, x in (("block_m", m_t), ("block_n", n_t), ("block_k", k_t)))
        return int(2 * item * (bm * bk + bk * bn) + 2 * out_item * bm * bn + 4 * bm * bn)

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        bm, bn, bk = (min(int(c[k]), x) for k, x in (("block_m", m_t), ("block_n", n_t), ("block_k", k_t)))
        k_steps = -(-k_t // bk)
        steps = b_t * -(-m_t // bm) * -(-n_t // bn) * k_steps
        # the left operand is read once per n block, unless one k step keeps its block across them
        lhs_reads = -(-n_t // bn) if k_steps > 1 else 1
        hbm = item * b_t * (m_t * k_t * lhs_reads + k_t * n_t * -(-m_t // bm) + m_t * n_t)
        compute = flops_us(b_t * m_t, k_t, n_t, bm, bn, kind) + accumulator_us(steps, bm, bn)
        return max(compute, hbm / 1.6e12 * 1e6) + 0.35 * steps + (1e6 if vmem(c, d) > 48 * MiB else 0.0)

    # 512 blocks streamed 14p's activations 28 times at full (0.45x); 1024-wide n blocks still 14 times
    first = first_proposal(vmem, cost, WIDE, 48 * MiB, k_t, DEEP, TALL)
    return Template(
        name="batched_matmul",
        operators=("program",),
        source=SOURCE,
        tunables={"block_m": TALL, "block_n": WIDE, "block_k": DEEP},
        dims_of=lambda sizes: {"B": b_t, "M": m_t, "K": k_t, "N": n_t},
        problems=lambda c, d: block_problems(c, d, WIDE, DEEP, TALL),
        vmem_bytes=vmem,
        cost_us=cost,
        initial=first,
        fixed=lambda op: fixed,
        constraints=("block_m, block_n, block_k multiples of 128 (clamped; a K tail is masked)",),
        grid_axes=lambda c: ["batch", "m", "n", "k"],
        semantics=lambda c: ["parallel", "parallel", "parallel", "arbitrary"],
    )
