"""The fused program template on a chip without bf16 vector math (op_families.f32_program): a bf16
LayerNorm-GELU over rows (28k's tail at a test size) gets a body that computes in f32, each bf16 input
widened once on load and the output rounded once on store; on a chip with bf16 math the body stays as
traced. Both match the reference in TPU interpret mode; a program with a contraction is left as traced."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_files import interpret, module

from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.op_families import f32_program
from maxkernel.tpu_tools.problem.program import describe

REF = '''"""LayerNorm over the last axis, tanh-GELU, all bf16: 28k's tail at a test size."""
import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 64, "w": 256}, "small": {"n": 16, "w": 64}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 3)
    x = (jax.random.normal(ks[0], (d["n"], 8, d["w"])) * 3 + 1).astype(jnp.bfloat16)
    g = (1 + 0.1 * jax.random.normal(ks[1], (d["w"],))).astype(jnp.bfloat16)
    b = (0.1 * jax.random.normal(ks[2], (d["w"],))).astype(jnp.bfloat16)
    return x, g, b


def workload(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return jax.nn.gelu((x - mu) / jnp.sqrt(var + 1e-5) * g + b, approximate=True)
'''

DOT = '''"""A row's projection, then its GELU: a contraction, left as traced."""
import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 64}, "small": {"n": 16}}


def create_inputs(dtype=None, *, key=None, size="full"):
    ks = jax.random.split(jax.random.key(0 if key is None else key), 2)
    n = SIZES[size]["n"]
    return jax.random.normal(ks[0], (n, 128)).astype(jnp.bfloat16), jax.random.normal(ks[1], (128, 128)).astype(jnp.bfloat16)


def workload(x, w):
    return jax.nn.gelu(x @ w, approximate=True)
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("fused_f32")
    ref = root / "ln_gelu_reference.py"
    ref.write_text(REF)
    program = describe(str(ref)).model_dump(mode="json")
    ref_mod = module(root / "ln_gelu_ref.py", REF)
    inputs = ref_mod.create_inputs(size="small", key=3)
    oracle = np.asarray(ref_mod.workload(*[np.asarray(a, np.float32) for a in inputs]), np.float64)
    own = float(np.max(np.abs(np.asarray(ref_mod.workload(*inputs), np.float64) - oracle)))
    return root, program, inputs, oracle, own


def _render(program, bf16_vpu: bool) -> str:
    template, _, _ = program_template({**program, "bf16_vpu": bf16_vpu})
    return template.render({k: v[0] for k, v in template.tunables.items()}, "program")


@pytest.mark.slow  # two interpret-mode runs and a describe (~20 s on 2 cores): make test stays near 7 min
def test_without_bf16_vector_math_the_body_runs_in_f32_and_matches(built):
    root, program, inputs, oracle, own = built
    narrow, native = _render(program, False), _render(program, True)
    body = narrow.split("def _program", 1)[1].split("def _kernel", 1)[0]
    assert "jnp.bfloat16" not in body, body  # no bf16 literal, cast or value left in the body
    assert "x0_ref[...].astype(jnp.float32)" in narrow and "x2_ref[...].astype(jnp.float32)" in narrow
    assert ".astype(o0_ref.dtype)" in narrow  # the one rounding, on store
    assert "jnp.bfloat16" in native.split("def _program", 1)[1].split("def _kernel", 1)[0]
    assert "x0_ref[...].astype" not in native
    errs = {}
    for name, source in (("narrow", narrow), ("native", native)):
        got = interpret(root, name, source, inputs)
        assert got.shape == oracle.shape
        errs[name] = float(np.max(np.abs(got - oracle)))
    # measured (3 keys): the bf16 reference's own worst error 0.026-0.028 against the f32 oracle; the f32
    # body's 0.008 (the store's one rounding: half an ulp of bf16 at 2-4), the bf16 body's 0.026-0.034
    assert errs["narrow"] <= 0.6 * own and errs["native"] <= 2 * own, (errs, own)


def test_only_programs_without_contractions_or_native_bf16_are_widened(built, tmp_path):
    program = built[1]
    assert f32_program({**program, "bf16_vpu": True}) is None
    assert f32_program(program) is None  # no chip facts: left as traced
    wide = f32_program({**program, "bf16_vpu": False})
    assert wide is not None and [e["primitive"] for e in wide["equations"]] == [
        e["primitive"] for e in program["equations"]
    ]
    assert all(sp["dtype"] != "bfloat16" for e in wide["equations"] for sp in e["out_specs"])
    assert wide["inputs"] == program["inputs"] and wide["out_specs"] == program["out_specs"]
    ref = tmp_path / "dot_reference.py"
    ref.write_text(DOT)
    dot = describe(str(ref)).model_dump(mode="json")
    assert f32_program({**dot, "bf16_vpu": False}) is None
