"""The XLA ops beside a kernel are costed the way the plain-JAX program's ops are: each from its own program in
libtpu's LLO dump (tier llo), so the same transpose costs the same in the kernel's program and in XLA's. An
estimate is labeled llo only when its kernels and every op beside them are; an op the dump does not cover
makes it model, named in the note. One child process compiles both programs (libtpu reads the dump flags
once per process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys
from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, enable_dump
root = enable_dump(sys.argv[1])
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from maxkernel.tpu_tools.cost.analyze import estimate_one
from maxkernel.tpu_tools.cost.estimate import estimate_pallas
from maxkernel.tpu_tools.cost.fusions import cost_fusions
from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0 + 1.0

def scale(x):
    return pl.pallas_call(body, grid=(x.shape[0] // 512,), in_specs=[pl.BlockSpec((512, 2048), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((512, 2048), lambda i: (i, 0)), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

def plain(x):  # XLA's program: the transpose, then the same elementwise op
    return x.T * 3.0 + 1.0

def kernel(x):  # the transpose stays an XLA op beside the kernel
    return scale(x.T)

sh = execution.aot_sharding(parse_target("tpu-v6e"))
args = [jax.ShapeDtypeStruct((2048, 4096), jnp.float32, sharding=sh)]
out = {}
traced = jax.jit(plain).trace(*args)
compiled, programs, _ = compile_with_dump(plain, args, root, traced)
t = cost_fusions(compiled, "tpu-v6e", programs)
out["plain"] = [[f.opcode, f.tier, f.estimated_time_us, f.bytes_accessed] for f in t.fusions]
traced = jax.jit(kernel).trace(*args)
calls = find_pallas_calls(traced.jaxpr)
est, programs, facts = estimate_one(kernel, args, calls, "tpu-v6e", root, None, traced)
out["kernel"] = {"tier": est.tier, "note": est.tier_note, "total": est.estimated_time_us,
    "outside": [[f.opcode, f.tier, f.estimated_time_us, f.bytes_accessed] for f in est.xla_fusions.fusions]}
# the adversary: one op beside the kernel that the dump did not cover
table = est.xla_fusions
hit = table.fusions[0].model_copy(update={"tier": "model", "fallback": "no program of that name in the dump"})
table = table.model_copy(update={"fusions": [hit] + table.fusions[1:]})
fell = estimate_pallas(calls, "tpu-v6e", program=program_cost(traced.jaxpr), llo=programs, outside_fusions=table)
out["fell"] = {"tier": fell.tier, "note": fell.tier_note, "name": hit.name}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("dump")
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(root)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_an_op_beside_a_kernel_costs_what_it_costs_in_xlas_program(results):
    """The transpose is a copy op in both programs (its f32 [2048, 4096]), costed from its own bundles in each:
    the same figure, and the kernel's estimate stays llo."""
    (beside,) = [f for f in results["kernel"]["outside"] if f[0] == "copy"]
    (xla,) = [f for f in results["plain"] if f[0] == "copy"]
    assert beside[1] == xla[1] == "llo", results
    assert beside[3] == xla[3] == 2048 * 4096 * 4
    assert beside[2] == pytest.approx(xla[2], rel=1e-6)
    assert results["kernel"]["tier"] == "llo", results["kernel"]["note"]
    assert "XLA ops beside the kernels from their own programs" in results["kernel"]["note"]


def test_an_op_the_dump_does_not_cover_makes_the_estimate_model_and_is_named(results):
    fell = results["fell"]
    assert fell["tier"] == "model", fell
    assert results["kernel"]["tier"] == "llo"
    assert fell["name"] in fell["note"] and "no program of that name in the dump" in fell["note"], fell[
        "note"
    ]
    assert "beside them from the HLO model" in fell["note"]
