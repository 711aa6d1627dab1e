"""A scalar-prefetch table the program builds from its own constants is read, not taken for a ceiling.

A causal kernel that walks only the blocks it needs reads a block-kind table in SMEM (skip, whole block, the
diagonal's masked block) and branches on it with pl.when. When that table is computed from literals, iota
and shapes before the kernel (jnp.tril on static block counts), or baked in from NumPy, it is a compile-time
constant: the estimate evaluates it, and each pl.when body is charged on the steps whose entry selects it.
The same table handed in as an input stays unknown without its values: every body on every step, said to be
a ceiling. The compiled cases run in one child process (libtpu reads the LLO dump flags once).
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.tpu_tools.cost import data_work
from maxkernel.tpu_tools.cost.data_work import call_data

NB = 8  # q and kv blocks per sequence
SHARE_WHOLE = NB * (NB - 1) / 2 / NB**2  # blocks strictly below the diagonal: 28 of 64
SHARE_DIAGONAL = 1 / NB

KERNEL = """
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

NB, B, D = 8, 128, 128
S = NB * B


def kinds_table():  # [q block, kv block]: 0 above the diagonal (skipped), 1 a whole block, 2 the diagonal's
    below = jnp.tril(jnp.ones((NB, NB), jnp.int32), -1)
    return below + 2 * jnp.eye(NB, dtype=jnp.int32)


def kernel(kind_ref, q_ref, k_ref, v_ref, o_ref, acc_ref):
    i, j = pl.program_id(0), pl.program_id(1)
    kind = kind_ref[i, j]

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def update(masked):
        s = jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32)  # [B, B]
        if masked:
            rows = jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, 0.0)
        acc_ref[...] += jnp.dot(s.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32)

    pl.when(kind == 1)(lambda: update(False))
    pl.when(kind == 2)(lambda: update(True))

    @pl.when(j == NB - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def attend(kinds, q, k, v):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(NB, NB),
        # q and out are (S, D): the [B, D] rows of q block i; k and v: the rows of kv block j
        in_specs=[pl.BlockSpec((B, D), lambda i, j, t: (i, 0)), pl.BlockSpec((B, D), lambda i, j, t: (j, 0)),
                  pl.BlockSpec((B, D), lambda i, j, t: (j, 0))],
        out_specs=pl.BlockSpec((B, D), lambda i, j, t: (i, 0)),
        scratch_shapes=[pltpu.VMEM((B, D), jnp.float32)],
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((S, D), q.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(kinds, q, k, v)


def built(q, k, v):  # the table from jnp on static shapes
    return attend(kinds_table(), q, k, v)


def baked(q, k, v):  # the same table computed in NumPy: a constant of the traced program
    return attend(jnp.asarray(np.tril(np.ones((NB, NB), np.int32), -1) + 2 * np.eye(NB, dtype=np.int32)), q, k, v)


def handed_in(q, k, v, kinds):  # the same table as an input: its values are the caller's
    return attend(kinds, q, k, v)
"""

SCRIPT = """
import json, sys
from maxkernel.tpu_tools.cost.llo_dump import enable_dump
root = enable_dump(sys.argv[1])
import jax, jax.numpy as jnp
from maxkernel.tpu_tools.cost.analyze import estimate_one
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls
exec(sys.argv[2])

sh = execution.aot_sharding(parse_target("tpu-v6e"))
qkv = [jax.ShapeDtypeStruct((S, D), jnp.bfloat16, sharding=sh)] * 3
cases = {"built": (built, qkv), "handed_in": (handed_in, [*qkv, jax.ShapeDtypeStruct((NB, NB), jnp.int32, sharding=sh)])}
out = {}
for name, (fn, args) in cases.items():
    traced = jax.jit(fn).trace(*args)
    est, _, facts = estimate_one(fn, args, find_pallas_calls(traced.jaxpr), "tpu-v6e", root, None, traced=traced)
    assert est is not None and "error" not in facts, facts
    out[name] = {"tier": est.tier, "reason": est.reason, **est.per_call[0].model_dump(mode="json")}
print(json.dumps(out))
"""


def _kernel_module() -> dict:
    scope: dict = {}
    exec(KERNEL, scope)  # noqa: S102 - the test's own kernel source, shared with the child process
    return scope


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    dump = tmp_path_factory.mktemp("tables") / "dump"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(dump), KERNEL], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_each_pl_when_body_is_charged_on_the_steps_its_constant_table_selects(compiled):
    built = compiled["built"]
    assert built["tier"] == "llo"
    init, whole, diagonal, store = built["when_bodies"]
    assert init["fraction"] == store["fraction"] == pytest.approx(1 / NB)
    assert whole["fraction"] == pytest.approx(SHARE_WHOLE)
    assert diagonal["fraction"] == pytest.approx(SHARE_DIAGONAL)
    always = built["always_bundles_per_step"]
    expected = always + sum(b["bundles"] * b["fraction"] for b in built["when_bodies"])
    assert built["expected_bundles_per_step"] == pytest.approx(expected)
    assert any("constants of the program" in n for n in built["notes"]), built["notes"]
    assert not any("a ceiling" in n for n in built["notes"]), built["notes"]
    assert "a ceiling" not in built["reason"], built["reason"]


def test_the_same_table_handed_in_as_an_input_stays_a_ceiling(compiled):
    built, handed = compiled["built"], compiled["handed_in"]
    assert [b["fraction"] for b in handed["when_bodies"]] == [1 / NB, None, None, 1 / NB]
    assert any("no input values were had" in n and "a ceiling" in n for n in handed["notes"]), handed["notes"]
    assert "a ceiling" in handed["reason"], handed["reason"]
    # Both bodies on every step: the ceiling is above what the constant table's steps run.
    assert handed["expected_bundles_per_step"] > 1.5 * built["expected_bundles_per_step"]


def _prefetch(fn, *args) -> list:
    (data,) = call_data(jax.jit(fn).trace(*args).jaxpr)
    return data.prefetch


def test_constant_tables_are_evaluated_and_input_derived_ones_are_not():
    m = _kernel_module()
    q = jax.ShapeDtypeStruct((m["S"], m["D"]), jnp.bfloat16)
    table = np.tril(np.ones((NB, NB), np.int32), -1) + 2 * np.eye(NB, dtype=np.int32)
    (built,) = _prefetch(m["built"], q, q, q)
    (baked,) = _prefetch(m["baked"], q, q, q)
    np.testing.assert_array_equal(built, table)
    np.testing.assert_array_equal(baked, table)
    assert _prefetch(m["handed_in"], q, q, q, jax.ShapeDtypeStruct((NB, NB), jnp.int32)) == [None]

    def derived(q, k, v, lengths):  # a table computed from an input's values (a ragged kernel's lengths)
        kinds = jnp.minimum(m["kinds_table"]() + lengths[:, None], 2)
        return m["attend"](kinds, q, k, v)

    assert _prefetch(derived, q, q, q, jax.ShapeDtypeStruct((NB,), jnp.int32)) == [None]


def test_a_constant_table_over_the_bound_is_not_evaluated_and_says_so(monkeypatch):
    m = _kernel_module()
    q = jax.ShapeDtypeStruct((m["S"], m["D"]), jnp.bfloat16)
    monkeypatch.setattr(data_work, "MAX_VALUE_ELEMENTS", NB * NB - 1)
    (data,) = call_data(jax.jit(m["built"]).trace(q, q, q).jaxpr)
    assert data.prefetch == [None] and data.counts is None
    assert any("over the" in n and "not evaluated" in n for n in data.notes), data.notes
