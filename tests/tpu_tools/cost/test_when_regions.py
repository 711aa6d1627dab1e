"""A pl.when body is charged on the grid steps that take it, from the compiled loop's own regions.

A k-tiled matmul's epilogue runs under `pl.when(k == last)`: once per output block, not once per k-step.
The compiled grid loop holds its bundles all the same (Mosaic branches over them), so the estimate pairs
the loop's pl.when regions (the ones directly inside the pipeline's stage guard) with the body's conds and
charges each on its share of the steps. A heavy epilogue (GELU + softmax over whole rows) can be most of
the loop: the old parser took any branch over half the loop for the stage guard and charged it every
step. Compiled for v6e with libtpu's LLO dump, in one child process (libtpu reads the dump flags once).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from maxkernel.tpu_tools.hardware.chips import get_chip

M, K, N = 1024, 4096, 2048
BM, BK = 512, 256
K_STEPS = K // BK  # the epilogue runs on 1 of these per output block

SCRIPT = """
import json, sys
from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, enable_dump
root = enable_dump(sys.argv[1])
M, K, N, BM, BK = json.loads(sys.argv[2])
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from maxkernel.tpu_tools.cost.estimate import estimate_pallas
from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls


def gelu_softmax(acc):  # [BM, N] f32: GELU, then softmax over the whole row
    g = 0.5 * acc * (1.0 + jnp.tanh(0.79788456 * (acc + 0.044715 * acc**3)))
    e = jnp.exp(g - jnp.max(g, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def matmul(epilogue, every_step=False):
    def kernel(a_ref, b_ref, o_ref, acc_ref):
        k = pl.program_id(1)

        @pl.when(k == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        if every_step:  # the same epilogue on every k-step: what charging it every step would cost
            o_ref[...] = epilogue(acc_ref[...]).astype(o_ref.dtype)
        else:

            @pl.when(k == pl.num_programs(1) - 1)
            def _store():
                o_ref[...] = epilogue(acc_ref[...]).astype(o_ref.dtype)

    def f(a, b):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((M, N), jnp.bfloat16),
            grid=(M // BM, K // BK),
            # a is (M, K): the [BM, BK] tile of row block i at k-step k
            # b is (K, N): the [BK, N] tile at k-step k; the output row block is resident across k
            in_specs=[pl.BlockSpec((BM, BK), lambda i, k: (i, k)), pl.BlockSpec((BK, N), lambda i, k: (k, 0))],
            out_specs=pl.BlockSpec((BM, N), lambda i, k: (i, 0)),
            scratch_shapes=[pltpu.VMEM((BM, N), jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        )(a, b)

    return f


sh = execution.aot_sharding(parse_target("tpu-v6e"))
args = [jax.ShapeDtypeStruct((M, K), jnp.bfloat16, sharding=sh), jax.ShapeDtypeStruct((K, N), jnp.bfloat16, sharding=sh)]
cases = {"heavy": matmul(gelu_softmax), "trivial": matmul(lambda acc: acc), "every_step": matmul(gelu_softmax, True)}
out = {}
for name, fn in cases.items():
    jaxpr = jax.make_jaxpr(fn)(*args)
    _, llo, _ = compile_with_dump(fn, args, root)
    e = estimate_pallas(find_pallas_calls(jaxpr), "tpu-v6e", program=program_cost(jaxpr), llo=llo)
    out[name] = {"tier": e.tier, "reason": e.reason, **e.per_call[0].model_dump(mode="json")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    dump = tmp_path_factory.mktemp("when") / "dump"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(dump), json.dumps([M, K, N, BM, BK])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_loops_pl_when_bodies_pair_with_the_conds_and_run_on_their_share(compiled):
    heavy = compiled["heavy"]
    assert heavy["tier"] == "llo"
    init, store = heavy["when_bodies"]
    assert init["fraction"] == store["fraction"] == pytest.approx(1 / K_STEPS)
    # The epilogue is most of the loop: a branch over half of it is no longer taken for the stage guard.
    assert store["bundles"] > heavy["bundles_per_step"] / 2
    assert heavy["always_bundles_per_step"] + init["bundles"] + store["bundles"] == heavy["bundles_per_step"]
    expected = heavy["always_bundles_per_step"] + (init["bundles"] + store["bundles"]) / K_STEPS
    assert heavy["expected_bundles_per_step"] == pytest.approx(expected)
    clock_hz = get_chip("tpu-v6e").clock_ghz * 1e9
    assert heavy["compute_time_us"] == pytest.approx(expected / clock_hz * heavy["steps"] * 1e6)
    # The verdict says what a step is charged, body by body.
    assert f"{store['bundles']} on 1/{K_STEPS} of steps" in heavy["reason"], heavy["reason"]
    assert any("pl.when bodies paired in order" in n for n in heavy["notes"]), heavy["notes"]


def test_a_heavy_epilogue_adds_its_bundles_over_the_k_steps_not_times_them(compiled):
    heavy, trivial, every = compiled["heavy"], compiled["trivial"], compiled["every_step"]
    epilogue = heavy["when_bodies"][-1]["bundles"] - trivial["when_bodies"][-1]["bundles"]
    assert epilogue > heavy["always_bundles_per_step"]  # the heavy one is heavy: more than the dot's step
    grown = heavy["expected_bundles_per_step"] - trivial["expected_bundles_per_step"]
    # ~epilogue / k-steps a step (the steady part compiles within a few percent alike), never epilogue
    assert grown == pytest.approx(epilogue / K_STEPS, abs=0.05 * trivial["always_bundles_per_step"])
    assert heavy["compute_time_us"] < 1.5 * trivial["compute_time_us"]
    # Every bundle of the loop on every step (the epilogue x 16) would be over 3x what it is charged.
    clock_hz = get_chip("tpu-v6e").clock_ghz * 1e9
    assert heavy["bundles_per_step"] * heavy["steps"] / clock_hz * 1e6 > 3 * heavy["compute_time_us"]
    # The same epilogue on every k-step has no branch over it, and is charged on every step.
    assert len(every["when_bodies"]) == 1  # the init alone
    assert every["expected_bundles_per_step"] > 0.5 * epilogue
    assert every["compute_time_us"] > 2.5 * heavy["compute_time_us"]
