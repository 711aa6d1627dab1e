"""A convolution followed by a norm: two Pallas kernels in one module (templates/conv_split.py).

The offline model now serves these programs with conv_norm (two passes that recompute the conv: its
cost model puts it under conv_split's, and it matches at the same unseen size for both norms); the
tests below build conv_split directly. The conv's kernel (window.py) takes the conv and its bias, the fused program template the norm; the
module compiles at its production size with the real Mosaic compiler and matches the reference in TPU
interpret mode at a check size no trace saw (W > H there, H > W in the traces), so a divisor written as
the traced (H - 2) * (W - 2) literal, or any number of a trace, would fail it. A batch norm (statistics over N, H and
W) cannot tile the samples: its second kernel walks the channels instead.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.clients.offline.model import _rest_template, program_template
from maxkernel.clients.offline.templates.conv_split import build, split
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

REF = """
import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "conv_norm", "model": "ops", "operator": "conv_norm", "atol": 2e-2, "rtol": 2e-2}
SIZES = {
    "full": {"n": 16, "c": 16, "o": 128, "h": 66, "w": 50},
    "small": {"n": 2, "c": 8, "o": 128, "h": 12, "w": 10},
}
AXES = __AXES__


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw, kb, ks = jax.random.split(jax.random.key(0 if key is None else key), 4)
    x = jax.random.uniform(kx, (d["n"], d["c"], d["h"], d["w"]), jnp.bfloat16)
    w = (jax.random.normal(kw, (d["o"], d["c"], 3, 3), jnp.float32) * 0.1).astype(jnp.bfloat16)
    b = (jax.random.normal(kb, (d["o"],), jnp.float32) * 0.1).astype(jnp.bfloat16)
    s = (1.0 + jax.random.normal(ks, (d["o"],), jnp.float32) * 0.1).astype(jnp.bfloat16)
    return x, w, b, s


def workload(x, w, b, s):
    y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + b.reshape(1, -1, 1, 1)  # [N, O, H - 2, W - 2] bf16
    f = y.astype(jnp.float32)
    mean = jnp.mean(f, axis=AXES, keepdims=True)
    var = jnp.mean(jnp.square(f - mean), axis=AXES, keepdims=True)
    z = ((f - mean) * lax.rsqrt(var + 1e-5)).astype(jnp.bfloat16)
    return z * s.reshape(1, -1, 1, 1)
"""
INSTANCE, BATCH = "(2, 3)", "(0, 2, 3)"


def _smallest(template) -> dict:
    """The smallest legal blocks (many grid steps), 32 channels a step in the second kernel (4 steps)."""
    return {k: 32 if k == "block_tail_axis1" else v[0] for k, v in template.tunables.items()}


def _matches(kernel, ref, size: dict) -> None:
    ref.SIZES["check"] = size
    inputs = ref.create_inputs(size="check", key=3)
    want = ref.workload(*inputs)
    with execution.tpu_interpret_mode():
        got = jax.jit(kernel.workload)(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(want, np.float32), atol=2e-2, rtol=2e-2
    )


def _setup(tmp_path: Path, axes: str):
    text = REF.replace("__AXES__", axes)
    path = tmp_path / "conv_norm_reference.py"
    path.write_text(text)
    program = describe(str(path)).model_dump(mode="json")
    return program, written(tmp_path / "conv_norm_ref.py", text)


def test_the_cut_is_the_convs_biased_output_and_the_tail_reads_it_back(tmp_path):
    program, _ = _setup(tmp_path, INSTANCE)
    found = split(program)
    assert found is not None
    (conv,) = [e for e in found.head["equations"] if e["primitive"] == "conv_general_dilated"]
    add = found.head["equations"][-1]
    assert add["primitive"] == "add" and add["outputs"] == [found.cut] and conv["outputs"][0] in add["inputs"]
    assert found.tail["input_names"][0] == found.cut and "conv_general_dilated" not in found.tail["census"]
    # the tail is traced as its own program at every size: the cut's shape there is the conv's output
    full = found.tail["variants"]["full"]["inputs"][0]["shape"]
    assert full == [16, 128, 64, 48] and found.tail["inputs"][0]["dtype"] == "bfloat16"


@pytest.mark.slow  # a compile at full or an interpret run at a check size: `make test-slow`
def test_a_conv_then_instance_norm_is_two_kernels_that_compile_at_full(tmp_path):
    program, ref = _setup(tmp_path, INSTANCE)
    template, target, _ = build(program, _rest_template)
    source = template.render(template.initial, "program")
    assert template.name == "conv_split" and target == "full" and "template=conv_split" in source
    assert source.count("pl.pallas_call(") == 2 and "conv_general_dilated" not in source
    assert "sh[0][2] * sh[0][3]" in source  # the mean's count from the tail's input: H' * W'
    t = parse_target("tpu-v6e")
    sharding = execution.aot_sharding(t)
    full = [
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in jax.eval_shape(ref.create_inputs)
    ]
    kernel = written(tmp_path / "first.py", source)
    with trace_as_target(t):
        text = jax.jit(kernel.workload).lower(*full).compile().as_text()
    assert text.count("tpu_custom_call") >= 2 or "custom-call" in text


@pytest.mark.slow  # a compile at full or an interpret run at a check size: `make test-slow`
def test_a_conv_then_instance_norm_matches_the_reference_at_a_size_no_trace_saw(tmp_path):
    program, ref = _setup(tmp_path, INSTANCE)
    template, _, _ = build(program, _rest_template)
    kernel = written(tmp_path / "small.py", template.render(_smallest(template), "program"))  # many blocks
    _matches(kernel, ref, {"n": 2, "c": 4, "o": 128, "h": 6, "w": 9})  # W > H here, H > W in the traces


@pytest.mark.slow  # an interpret run at a check size: `make test-slow`
def test_a_batch_norm_after_a_conv_walks_the_channels_in_its_second_kernel(tmp_path):
    program, ref = _setup(tmp_path, BATCH)
    template, _, _ = build(program, _rest_template)
    tail = {k for k in template.tunables if k.startswith("block_tail")}
    assert template.name == "conv_split" and tail == {"block_tail_axis1"}  # samples mix, channels do not
    source = template.render(_smallest(template), "program")
    assert "x3.reshape((1, -1, 1, 1))" in source  # the scale as a [1, C, 1, 1] block along the channels
    _matches(written(tmp_path / "bn.py", source), ref, {"n": 2, "c": 4, "o": 128, "h": 6, "w": 9})


@pytest.mark.parametrize("axes", [pytest.param(INSTANCE, marks=pytest.mark.slow), BATCH])  # ~14 s each
def test_the_model_serves_a_conv_then_a_norm_with_conv_norm_which_matches_at_an_unseen_size(tmp_path, axes):
    program, ref = _setup(tmp_path, axes)
    template, target, _ = program_template(program)
    assert template.name == "conv_norm" and target == "full"
    kernel = written(
        tmp_path / "norm.py", template.render({k: v[0] for k, v in template.tunables.items()}, "program")
    )
    _matches(kernel, ref, {"n": 2, "c": 4, "o": 128, "h": 6, "w": 9})
