"""pl.when branches are charged on the grid steps that run them, not on every step.

A causal flash kernel skips the kv blocks above the diagonal under `pl.when(ki <= last)`: charged every
step, it costs what the full (non-causal) kernel costs, and a two-pass kernel four times its work. The
predicates are evaluated over the grid when they are functions of the program ids; the adversary is a
kernel whose predicate reads memory (a scalar-prefetch table): nothing is known about how often its
branch runs, so it stays charged on every step, and a kernel that hides its work behind an always-true
predicate is charged for all of it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from maxkernel.tpu_tools.cost.branches import kernel_branches
from maxkernel.tpu_tools.cost.estimate import estimate_pallas
from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

N, B, D = 4096, 512, 512  # an 8 x 8 grid of (q block, kv block); steps well above the fixed step cost


def _attention(predicate):
    """A flash-style kernel whose kv step runs under `predicate(qi, ki)` (None: every step)."""

    def kernel(q_ref, k_ref, o_ref, acc_ref):
        qi, ki = pl.program_id(0), pl.program_id(1)

        @pl.when(ki == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        def step():
            s = jnp.dot(q_ref[...], k_ref[...].T, preferred_element_type=jnp.float32)
            p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
            acc_ref[...] += jnp.dot(p.astype(k_ref.dtype), k_ref[...], preferred_element_type=jnp.float32)

        if predicate is None:
            step()
        else:
            pl.when(predicate(qi, ki))(step)

        @pl.when(ki == pl.num_programs(1) - 1)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def f(q, k):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((N, D), jnp.bfloat16),
            grid=(N // B, N // B),
            in_specs=[pl.BlockSpec((B, D), lambda i, j: (i, 0)), pl.BlockSpec((B, D), lambda i, j: (j, 0))],
            out_specs=pl.BlockSpec((B, D), lambda i, j: (i, 0)),
            scratch_shapes=[pltpu.VMEM((B, D), jnp.float32)],
        )(q, k)

    return f


SHAPES = [jax.ShapeDtypeStruct((N, D), jnp.bfloat16)] * 2


def _pallas_eqn(f, shapes=SHAPES):
    jaxpr = jax.make_jaxpr(f)(*shapes)
    return jaxpr, next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call")


def test_each_branch_runs_on_the_share_of_the_grid_its_predicate_holds():
    _, eqn = _pallas_eqn(_attention(lambda qi, ki: ki <= qi))
    kb = kernel_branches(eqn)
    assert kb is not None and kb.steps == 64 and kb.unknown == 0
    taken = [cond[1].fraction for cond in kb.conds]
    assert taken == pytest.approx([8 / 64, 36 / 64, 8 / 64])  # init, the causal step, the store
    assert kb.conds[1][1].flops == 2 * (2 * B * B * D)  # both dots of one step; the skip branch has none
    assert kb.conds[1][0].flops == 0


def _estimate(f, shapes=SHAPES):
    jaxpr, _ = _pallas_eqn(f, shapes)
    return estimate_pallas(find_pallas_calls(jaxpr), "tpu-v5e", program=program_cost(jaxpr))


def test_a_causal_kernel_costs_about_half_of_the_full_one_and_its_estimate_says_why():
    full = _estimate(_attention(None))
    causal = _estimate(_attention(lambda qi, ki: ki <= qi))
    always = _estimate(_attention(lambda qi, ki: ki >= 0))  # a predicate that always holds hides nothing
    ratio = causal.estimated_time_us / full.estimated_time_us
    assert 0.5 <= ratio <= 0.7, ratio  # 36 of 64 steps do the work; every step keeps its fixed cost
    assert always.estimated_time_us == pytest.approx(full.estimated_time_us, rel=0.02)
    notes = causal.per_call[0].notes
    assert any("0.56" in n and "of the 64 grid steps" in n for n in notes), notes


def test_a_predicate_that_reads_memory_is_charged_every_step():
    def kernel(flags_ref, q_ref, o_ref):
        @pl.when(flags_ref[pl.program_id(0)] > 0)  # which steps run is data, not the grid
        def _work():
            o_ref[...] = jnp.dot(q_ref[...], q_ref[...].T, preferred_element_type=jnp.float32)[:, :D]

    def f(flags, q):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((N, D), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(N // B,),
                in_specs=[pl.BlockSpec((B, D), lambda i, flags: (i, 0))],
                out_specs=pl.BlockSpec((B, D), lambda i, flags: (i, 0)),
            ),
        )(flags, q)

    shapes = [jax.ShapeDtypeStruct((N // B,), jnp.int32), SHAPES[0]]
    _, eqn = _pallas_eqn(f, shapes)
    kb = kernel_branches(eqn)
    assert kb is not None and kb.unknown == 1 and kb.conds[0][1].fraction is None
    est = _estimate(f, shapes)
    assert not any("grid steps (predicates evaluated" in n for n in est.per_call[0].notes)


def _flash_eqn(batch, heads, seq):
    """The pallas_call equation of jax's causal flash attention (grid: batch, heads, q blocks, kv blocks)."""
    from jax.experimental.pallas.ops.tpu.flash_attention import flash_attention

    from maxkernel.tpu_tools.problem.pallas_info import _walk

    s = jax.ShapeDtypeStruct((batch, heads, seq, 128), jnp.bfloat16)
    jaxpr = jax.make_jaxpr(lambda q, k, v: flash_attention(q, k, v, causal=True, sm_scale=0.1))(s, s, s)
    (eqn,) = [e for e, _ in _walk(jaxpr.jaxpr, "")]
    return eqn


def test_predicates_read_over_the_axes_they_use_give_the_every_step_shares_exactly():
    """Issue 33 (estimate time at long sequences): the predicates are evaluated on the axes the body reads
    (flash: q block, kv block), not on every step; each share is the same fraction as on every step, and
    a grid past MAX_STEPS whose predicates read a few axes is still evaluated."""
    from maxkernel.tpu_tools.cost.branches import MAX_STEPS

    eqn = _flash_eqn(2, 3, 1024)  # 2 x 3 x 8 x 8 steps
    fast, every = kernel_branches(eqn), kernel_branches(eqn, every_step=True)
    assert fast is not None and fast.known and fast.steps == 2 * 3 * 8 * 8
    assert fast == every  # every fraction, flop and element count identical
    assert any(b.fraction is not None and 0 < b.fraction < 1 for c in fast.conds for b in c)
    big = kernel_branches(_flash_eqn(16, 32, 16384))  # 8M steps: over MAX_STEPS, 16K points read
    assert big.steps > MAX_STEPS and big.known
    assert [[b.fraction for b in c] for c in big.conds if c[0].fraction is not None] == [
        [b.fraction for b in c]
        for c in kernel_branches(_flash_eqn(1, 1, 16384)).conds
        if c[0].fraction is not None
    ]
