"""The cross-entropy template: an LM head's matmul, online log-sum-exp over vocab tiles, a label pick.

13p's program (the log-softmax in bf16, take_along_axis, the mean) gets the template, and its kernel with
small blocks (several vocab tiles, the last one past V; two token blocks) matches the reference in TPU
interpret mode; the first kernel compiles at the production size (B 8192, V 128256) with the real Mosaic
compiler. Other spellings of the same loss are served with their own sign and reduction (tied [V, H]
weights, logsumexp minus the picked logit, per-token losses); a loss that is not this one (label
smoothing, a divisor that is not B) is left to the other templates.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.clients.offline.classify import classify
from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates import cross_entropy
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.program import describe

TASK = str(Path(__file__).resolve().parents[3] / "jaxbench" / "tasks" / "13p_Cross_Entropy")

VARIANT = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"b": 2048, "h": 1024, "v": 32000}, "small": {"b": 64, "h": 128, "v": 1000}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    k1, k2, k3 = jax.random.split(jax.random.key(0) if key is None else key, 3)
    h = jax.random.normal(k1, (s["b"], s["h"]), jnp.float32)
    w = 0.05 * jax.random.normal(k2, WEIGHT_SHAPE, jnp.float32)
    labels = jax.random.randint(k3, (s["b"],), 0, s["v"], jnp.int32)
    return h, w, labels


def workload(h, w, labels):
    logits = LOGITS
    BODY
"""

TIED_TOKENS = {  # tied embeddings [V, H]; per-token losses as logsumexp minus the picked logit
    "WEIGHT_SHAPE": '(s["v"], s["h"])',
    "LOGITS": "h @ w.T",
    "BODY": (
        "picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]\n"
        "    return jax.nn.logsumexp(logits, axis=-1) - picked"
    ),
}
SUM_OF_LOGPROBS = {  # [H, V]; the sum of the picked log-probabilities (a log-likelihood: the other sign)
    "WEIGHT_SHAPE": '(s["h"], s["v"])',
    "LOGITS": "h @ w",
    "BODY": "return jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1))",
}
SMOOTHED = {  # label smoothing: a mean over all the vocab too; not this template's loss
    "WEIGHT_SHAPE": '(s["h"], s["v"])',
    "LOGITS": "h @ w",
    "BODY": (
        "lp = jax.nn.log_softmax(logits)\n"
        "    picked = jnp.take_along_axis(lp, labels[:, None], axis=-1)[:, 0]\n"
        "    return -jnp.mean(0.9 * picked + 0.1 * jnp.mean(lp, axis=-1))"
    ),
}
HALF_MEAN = {  # divides the sum by a constant that is not B at every size
    "WEIGHT_SHAPE": '(s["h"], s["v"])',
    "LOGITS": "h @ w",
    "BODY": (
        "picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1)[:, 0]\n"
        "    return -jnp.sum(picked) / 64.0"
    ),
}


def _variant(tmp_path: Path, name: str, parts: dict[str, str]) -> Path:
    text = VARIANT
    for k, v in parts.items():
        text = text.replace(k, v)
    path = tmp_path / f"{name}_ref.py"
    path.write_text(text)
    return path


def _module(path: Path, source: str | None = None):
    if source is not None:
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _interpret(mod, inputs):
    with execution.tpu_interpret_mode():
        return np.asarray(jax.jit(mod.workload)(*inputs))


@pytest.fixture(scope="module")
def task_program():
    return describe(TASK).model_dump(mode="json")


def test_13p_gets_the_template_and_its_kernel_matches_the_reference_across_vocab_tiles(
    task_program, tmp_path
):
    assert classify(task_program).kind == "matmul"
    template, target, _ = program_template(task_program)
    assert template.name == "cross_entropy" and target == "full"
    # several vocab tiles, the last one past V (4096 = 5 x 768 + 256), and two token blocks
    mod = _module(tmp_path / "k.py", template.render({"block_t": 128, "block_v": 768}, "program"))
    ref = _module(Path(TASK) / "__init__.py")
    inputs = ref.create_inputs(size="small", key=3)
    got, want = _interpret(mod, inputs), np.asarray(jax.jit(ref.workload)(*inputs))
    assert got.shape == () and got.dtype == np.float32
    # the reference's log-softmax is bf16 (a 12.6 loss has a bf16 ulp of 0.0625): the kernel's f32 online
    # softmax is closer to an f32 oracle than the reference is
    oracle = np.asarray(
        jax.jit(ref.workload)(*[x.astype(np.float32) if x.dtype != np.int32 else x for x in inputs])
    )
    assert abs(got - oracle) <= abs(want - oracle) + 1e-3, (got, want, oracle)
    assert abs(got - want) < 0.05
    # a kernel that forgot to rescale the running sum when the max grows is off: the check sees it
    wrong = template.render({"block_t": 128, "block_v": 768}, "program").replace(
        "sum_ref[...] * jnp.exp(prev - new)", "sum_ref[...]"
    )
    assert abs(_interpret(_module(tmp_path / "wrong.py", wrong), inputs) - want) > 0.05


@pytest.mark.slow  # a compile at full or an interpret run at a check size: `make test-slow`
def test_the_first_kernel_compiles_at_the_production_vocabulary(task_program, tmp_path):
    source = first_kernel(task_program, get_chip("tpu-v6e"))
    assert "template=cross_entropy" in source and '("parallel", "arbitrary")' in source
    target = parse_target("tpu-v6e")
    sharding = execution.aot_sharding(target)
    ref = _module(Path(TASK) / "__init__.py")
    full = [
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in jax.eval_shape(ref.create_inputs)
    ]
    first = _module(tmp_path / "first.py", source)
    with trace_as_target(target):
        compiled = jax.jit(first.workload).lower(*full).compile()
    assert compiled is not None


@pytest.mark.parametrize(
    ("name", "parts", "sign", "reduce"),
    [("tied_tokens", TIED_TOKENS, -1, "none"), ("sum_of_logprobs", SUM_OF_LOGPROBS, 1, "sum")],
)
def test_other_spellings_get_their_own_sign_and_reduction(tmp_path, name, parts, sign, reduce):
    path = _variant(tmp_path, name, parts)
    program = describe(str(path)).model_dump(mode="json")
    found = cross_entropy.recognise(program, Symbolic(program))
    assert found is not None and (found["sign"], found["reduce"]) == (sign, reduce)
    assert found["weight_vh"] == (name == "tied_tokens")
    template, _, _ = program_template(program)
    assert template.name == "cross_entropy"
    mod = _module(tmp_path / "k.py", template.render({"block_t": 128, "block_v": 256}, "program"))
    ref = _module(path)
    inputs = ref.create_inputs(size="small", key=jax.random.key(5))
    want = np.asarray(jax.jit(ref.workload)(*inputs))
    got = _interpret(mod, inputs)
    assert got.shape == want.shape
    # f32 operands at the default precision: one bf16 pass on both sides (the kernel's _mxu_dot casts)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * max(1.0, float(np.abs(want).max()) / 100))


@pytest.mark.parametrize(("name", "parts"), [("smoothed", SMOOTHED), ("half_mean", HALF_MEAN)])
def test_a_loss_that_is_not_this_one_is_left_to_the_other_templates(tmp_path, name, parts):
    program = describe(str(_variant(tmp_path, name, parts))).model_dump(mode="json")
    assert cross_entropy.recognise(program, Symbolic(program)) is None
