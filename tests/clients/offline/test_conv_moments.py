"""The conv_moments template (templates/conv_moments.py): a convolution whose output is only summed,
through ops of degree <= 2 in it, is one kernel of per-(image, channel) sums of y and y^2.

25k's form (conv3d, bias, GroupNorm, mean per image) at a test size, with a random gamma and
per-(image, channel) input offsets (so the answer is not mean(beta) for every image), and a 2-D conv
whose per-channel variance is the output (degree 2 out) match their references in TPU interpret mode; a kernel that sums the masked positions too fails the
same check. Programs with a nonlinear op on y, a full-size output, a cube, a sum keeping positions, or y times
a value that varies over its positions are refused with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_files import compiled_text, interpret, module

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.conv_moments import plan
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe

HEAD = """import jax
import jax.numpy as jnp

SIZES = {"full": SIZE_FULL, "small": SIZE_SMALL}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 6)
    x = jax.random.uniform(ks[0], (d["n"], d["c"], *d["sp"]), jnp.float32)
    x = (x + jax.random.normal(ks[5], (d["n"], d["c"]) + (1,) * len(d["sp"]))).astype(jnp.bfloat16)  # per image
    w = (jax.random.normal(ks[1], (d["o"], d["c"], *([3] * len(d["sp"])))) * 0.2).astype(jnp.bfloat16)
    b = (jax.random.normal(ks[2], (d["o"],)) * 0.2).astype(jnp.bfloat16)
    g = (1 + jax.random.normal(ks[3], (d["o"],))).astype(jnp.bfloat16)
    beta = (jax.random.normal(ks[4], (d["o"],)) * 0.2).astype(jnp.bfloat16)
    return x, w, b, g, beta


def conv(x, w):
    k = x.ndim - 2
    spec = ("NCDHW", "OIDHW", "NCDHW") if k == 3 else ("NCHW", "OIHW", "NCHW")
    return jax.lax.conv_general_dilated(x, w, (1,) * k, "VALID", dimension_numbers=spec)
"""


def _head(full: str, small: str) -> str:
    """HEAD with its SIZES filled in."""
    return HEAD.replace("SIZE_FULL", full).replace("SIZE_SMALL", small)


GROUPNORM_MEAN = (
    '"""conv3d + bias, GroupNorm (4 groups), mean per image: 25k\'s form at a test size, gamma random."""\n'
    + _head('{"n": 16, "c": 3, "o": 8, "sp": (12, 20, 24)}', '{"n": 3, "c": 3, "o": 8, "sp": (5, 8, 12)}')
    + """

def workload(x, w, b, g, beta):
    y = conv(x, w) + b.reshape(1, -1, 1, 1, 1)
    n, c = y.shape[:2]
    t = y.reshape(n, 4, c // 4, *y.shape[2:]).astype(jnp.float32)
    m = t.mean(axis=(2, 3, 4, 5), keepdims=True)
    v = ((t - m) ** 2).mean(axis=(2, 3, 4, 5), keepdims=True)
    z = ((t - m) / jnp.sqrt(v + 1e-5)).reshape(y.shape).astype(y.dtype)
    z = z * g.reshape(1, -1, 1, 1, 1) + beta.reshape(1, -1, 1, 1, 1)
    return jnp.mean(z.astype(jnp.float32), axis=(1, 2, 3, 4)).astype(y.dtype)
"""
)

CHANNEL_VARIANCE = (
    '"""conv2d + bias, scaled by gamma: its variance per (image, channel) over the positions."""\n'
    + _head('{"n": 8, "c": 4, "o": 16, "sp": (40, 36)}', '{"n": 2, "c": 4, "o": 16, "sp": (9, 14)}')
    + """

def workload(x, w, b, g, beta):
    y = (conv(x, w) + b.reshape(1, -1, 1, 1)).astype(jnp.float32) * g.reshape(1, -1, 1, 1).astype(jnp.float32)
    return jnp.var(y, axis=(2, 3)) + beta.astype(jnp.float32)
"""
)


def _built(root, name, text):
    ref = root / f"{name}_reference.py"
    ref.write_text(text)
    program = describe(str(ref)).model_dump(mode="json")
    ref_mod = module(root / f"{name}_ref.py", text)
    inputs = ref_mod.create_inputs(size="small", key=3)
    want = np.asarray(ref_mod.workload(*[np.asarray(a, np.float32) for a in inputs]), np.float32)
    return program, ref_mod, inputs, want


@pytest.fixture(scope="module")
def groupnorm(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv_moments")
    return (root, *_built(root, "gn_mean", GROUPNORM_MEAN))


@pytest.mark.slow  # the fixture traces a 3-D conv reference at its sizes (~6 s idle, 30 s beside a suite)
def test_a_groupnorm_mean_is_planned_as_forms_of_degree_two_and_gets_conv_moments(groupnorm):
    _, program, *_ = groupnorm
    found = plan(program)
    assert isinstance(found, dict) and found["spatial"] == 3
    assert max(found["degree"].values()) == 2  # the variance's square
    template, target, dims = program_template(program)
    assert template.name == "conv_moments" and target == "full" and dims["D"] == 12


@pytest.mark.slow  # two interpret runs and a full-size Mosaic compile (~40 s on 2 cores)
def test_conv_moments_matches_a_groupnorm_mean_and_a_kernel_summing_masked_positions_fails(groupnorm):
    root, program, ref_mod, inputs, want = groupnorm
    template, _, _ = program_template(program)
    source = template.render(template.initial, "program")
    got = interpret(root, "gn_mean", source, inputs)
    assert got.shape == want.shape == (3,)
    assert np.ptp(want) > 0.05  # gamma varies: the answer is not one number for every image
    assert np.max(np.abs(got - want)) <= 2e-2  # bf16 output near 1: an ulp or two of it
    broken = source.replace("(pos < ho * wd) & (pos % wd < wo)", "(pos < ho * wd)")
    assert broken != source
    assert not np.all(np.abs(interpret(root, "gn_mean_broken", broken, inputs) - want) <= 5e-2)
    text = compiled_text(
        root / "gn_full.py", first_kernel(program, get_chip("tpu-v6e")), ref_mod.create_inputs
    )
    assert "tpu_custom_call" in text


@pytest.mark.slow  # two interpret runs (~10 s on 2 cores)
@pytest.mark.parametrize("depths", [1, 2])
def test_fewer_output_depths_a_dot_match_over_a_partial_last_block(groupnorm, depths):
    """Small's 3 output depths: 2 a dot leave a last block of one (its band's second row past D', its
    input depths past D zeros); 1 a dot is a band with no zeros."""
    root, program, _, inputs, want = groupnorm
    template, _, _ = program_template(program)
    assert depths in template.tunables["block_depths"]
    source = template.render({**template.initial, "block_depths": depths}, "program")
    assert f"BLOCK_DEPTHS = {depths}" in source
    got = interpret(root, f"gn_mean_{depths}", source, inputs)
    assert np.max(np.abs(got - want)) <= 2e-2


@pytest.mark.slow  # one interpret run (~10 s on 2 cores)
def test_a_2d_conv_whose_variance_is_the_output_matches(tmp_path):
    program, _, inputs, want = _built(tmp_path, "var2d", CHANNEL_VARIANCE)
    template, _, dims = program_template(program)
    assert template.name == "conv_moments" and dims["D"] == 1
    got = interpret(tmp_path, "var2d", template.render(template.initial, "program"), inputs)
    assert got.shape == want.shape == (2, 16)
    assert np.allclose(got, want, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize(
    "body, reason",
    [
        ("return jnp.mean(jnp.tanh(conv(x, w)), axis=(2, 3, 4))", "tanh on the convolution's output"),
        ("y = conv(x, w)\n    return y * g.reshape(1, -1, 1, 1, 1)", "its output is the convolution's size"),
        ("y = conv(x, w).astype(jnp.float32)\n    return jnp.sum(y * y * y, axis=(2, 3, 4))", "degree > 2"),
        ("return jnp.sum(conv(x, w), axis=(2, 3))", "keeps some of the convolution's positions"),
        (
            "y = conv(x, w)\n    return jnp.sum(y + y[:, ::-1], axis=(2, 3, 4))",
            "rev on the convolution's output",
        ),
        ("return jnp.sum(conv(x, w) * x[:, :1, 2:, 2:, 2:], axis=(2, 3, 4))", "from statistics"),
    ],
)
def test_what_is_not_a_sum_of_degree_two_forms_is_refused_with_the_reason(tmp_path, body, reason):
    head = _head('{"n": 2, "c": 3, "o": 8, "sp": (5, 6, 7)}', '{"n": 1, "c": 3, "o": 8, "sp": (4, 5, 6)}')
    ref = tmp_path / "other_reference.py"
    ref.write_text(f"{head}\n\ndef workload(x, w, b, g, beta):\n    {body}\n")
    found = plan(describe(str(ref)).model_dump(mode="json"))
    assert isinstance(found, str) and reason in found


def test_25k_first_kernel_is_conv_moments_and_never_writes_the_conv_output():
    program = describe("25k").model_dump(mode="json")
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert "template=conv_moments" in source and "interpret=False" in source
    assert "conv_general_dilated" not in source  # the conv is the kernel's banded dot
    assert "sh[5][2] * sh[5][3] * sh[5][4]" in source  # the group's count read from the conv's shape


def test_y_times_an_input_that_varies_over_the_positions_is_refused(tmp_path):
    """A weighted sum of y by a full-size input is no form of y per (image, channel): c0 P would be wrong."""
    ref = tmp_path / "weighted_reference.py"
    ref.write_text(
        """import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 2}, "small": {"n": 1}}


def create_inputs(dtype=None, *, key=None, size="full"):
    n = SIZES[size]["n"]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 3)
    x = jax.random.normal(ks[0], (n, 3, 8, 9), jnp.float32)
    w = jax.random.normal(ks[1], (4, 3, 3, 3), jnp.float32)
    return x, w, jax.random.normal(ks[2], (n, 4, 6, 7), jnp.float32)


def workload(x, w, r):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jnp.sum(y * r, axis=(2, 3))
"""
    )
    found = plan(describe(str(ref)).model_dump(mode="json"))
    assert isinstance(found, str) and "varies over the convolution's positions" in found, found
