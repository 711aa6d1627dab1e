"""The conv_norm template (templates/conv_norm.py): a conv normalised over its own output in two passes
that each recompute the convolution.

An instance norm over a VALID, stride-1 conv with a bias (22k's form at a test size, 8 input channels:
16 output rows per dot) is cut into pass 1's per-(image, channel) sums of y and y^2 (the variance's
sum((y - mean)^2) rewritten from them), the statistics in plain JAX, and pass 2's conv with the whole
epilogue; its smallest-block render matches the reference in TPU interpret mode over several row blocks
(the last one partial). A kernel whose variance has the wrong sign on its cross term, one whose pass 1
sums the rows past Ho, and one that broadcasts the statistics over positions in the wrong order fail
the same check. A sum of a normalised value (three passes) is refused with the reason. A group norm
pooled over the channels by a logsumexp (46k's form) is two passes too, the second channels-in-sublanes;
wrong group statistics fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from kernel_files import interpret, module

from maxkernel.clients.offline.templates.conv_norm import build, plan
from maxkernel.tpu_tools.problem.program import describe

REF = '''"""conv (VALID, NCHW) + bias, instance norm, / 2, all bf16: 22k's form at a test size."""
import jax
import jax.numpy as jnp

SIZES = {
    "full": {"n": 32, "c": 8, "o": 128, "h": 64, "w": 40},
    "small": {"n": 2, "c": 8, "o": 128, "h": 40, "w": 12},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 3)
    x = jax.random.uniform(ks[0], (d["n"], d["c"], d["h"], d["w"]), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(ks[1], (d["o"], d["c"], 3, 3)) * 0.2).astype(jnp.bfloat16)
    b = (jax.random.normal(ks[2], (d["o"],)) * 0.2).astype(jnp.bfloat16)
    return x, w, b


def workload(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + b.reshape(1, -1, 1, 1)
    mean = jnp.mean(y.astype(jnp.float32), axis=(2, 3), keepdims=True)
    var = jnp.mean(jnp.square(y.astype(jnp.float32) - mean), axis=(2, 3), keepdims=True)
    return ((y - mean.astype(y.dtype)) / jnp.sqrt(var.astype(y.dtype) + 1e-5) / 2).astype(y.dtype)
'''

THREE_PASSES = REF.replace(
    "    return ((y - mean",
    "    z = (y.astype(jnp.float32) - mean) * jnp.mean(y.astype(jnp.float32) - mean, axis=(2, 3), keepdims=True)\n"
    "    return (jnp.sum(z, axis=(2, 3), keepdims=True) + (y - mean",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv_norm")
    ref = root / "convnorm_reference.py"
    ref.write_text(REF)
    program = describe(str(ref)).model_dump(mode="json")
    template, target, _ = build(program)
    ref_mod = module(root / "convnorm_ref.py", REF)
    small = template.render({k: v[0] for k, v in template.tunables.items()}, "program")
    inputs = ref_mod.create_inputs(size="small", key=3)
    want = np.asarray(ref_mod.workload(*[np.asarray(a, np.float32) for a in inputs]), np.float32)
    own = np.asarray(ref_mod.workload(*inputs), np.float32)
    return root, program, template, target, small, inputs, want, float(np.max(np.abs(own - want)))


def test_an_instance_norm_is_two_sums_of_one_value(built):
    _, program, template, target, small, *_ = built
    norm = plan(program)
    assert template.name == "conv_norm" and target == "full"
    assert len(norm.sums) == 2 and [sq for _, sq in norm.sums] == [False, True]  # y and y^2, each once
    assert sorted(r[0] for r in norm.reduces.values()) == ["sum", "var"]
    assert (
        "stats_workload(" in small and "apply_workload(" in small and "sh[3][2] * sh[3][3]" in small
    )  # H' * W' of the conv output


def test_conv_norm_matches_the_reference_across_row_blocks(built):
    root, _, _, _, small, inputs, want, own = built
    got = interpret(root, "small", small, inputs)
    # within the judge's rule: twice the bf16 reference's own error against the f32 oracle
    assert got.shape == want.shape and np.max(np.abs(got - want)) <= 2 * own


@pytest.mark.slow  # an interpret-mode run of both passes (~12 s on 2 cores)
def test_on_a_chip_without_bf16_vector_math_the_conv_result_stays_f32_and_matches(built):
    """Where the epilogue runs in f32 (v5e's chip facts: no bf16 vector math), the dot's f32 result feeds it
    unrounded in both passes: rounding it to the conv's bf16 first cost 3-4 vector ops an element (34k at
    full on v5e, llo: 2691 -> 2479 us) and moved it away from the f32 oracle. v6e's render keeps the
    rounding (bf16 epilogue). The f32 render matches the reference over the same row blocks."""
    root, program, _, _, small, inputs, want, own = built
    template, _, _ = build({**program, "bf16_vpu": False})
    f32 = template.render({k: v[0] for k, v in template.tunables.items()}, "program")
    assert f32.count("not rounded to bfloat16") == 2 and "astype(jnp.bfloat16).astype" not in f32
    assert small.count("acc.astype(jnp.bfloat16)") + small.count("acc_g.astype(jnp.bfloat16)") == 2
    got = interpret(root, "f32_epilogue", f32, inputs)
    assert got.shape == want.shape and np.max(np.abs(got - want)) <= 2 * own


@pytest.mark.slow  # interpret-mode runs of the kernel (12-18 s on 2 cores): make test stays under 7 min
@pytest.mark.parametrize(
    "good, bad",
    [
        ("- 2.0 * mean_", "+ 2.0 * mean_"),  # the variance's cross term with the wrong sign
        ("jnp.where(blk * th + i + lane_row < ho, part, 0.0)", "part"),  # pass 1 sums rows past Ho
        (  # the statistics broadcast over (n, w) instead of the rows' (w, n)
            "jnp.broadcast_to(s1_ref[...][None], (wo, nb, o)).reshape(wo * nb, o)",
            "jnp.repeat(s1_ref[...], wo, axis=0)",
        ),
    ],
)
def test_a_kernel_with_wrong_statistics_fails_the_check(built, good, bad):
    root, _, _, _, small, inputs, want, own = built
    broken = small.replace(good, bad)
    assert broken != small
    got = interpret(root, f"broken_{abs(hash(bad + good))}", broken, inputs)
    assert np.max(np.abs(got - want)) > 4 * own


def test_a_sum_of_a_normalised_value_is_refused(tmp_path):
    ref = tmp_path / "three_reference.py"
    ref.write_text(THREE_PASSES)
    why = plan(describe(str(ref)).model_dump(mode="json"))
    assert isinstance(why, str) and "another sum" in why


GROUPED = '''"""conv + bias, group norm (16 groups of 4 channels), tanh, hardswish, residual, logsumexp over the
channels, all bf16: 46k's form at a test size."""
import jax
import jax.numpy as jnp

SIZES = {
    "full": {"n": 32, "c": 8, "o": 64, "h": 64, "w": 40},
    "small": {"n": 2, "c": 8, "o": 64, "h": 40, "w": 12},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 3)
    x = jax.random.uniform(ks[0], (d["n"], d["c"], d["h"], d["w"]), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(ks[1], (d["o"], d["c"], 3, 3)) * 0.2).astype(jnp.bfloat16)
    b = (jax.random.normal(ks[2], (d["o"],)) * 0.2).astype(jnp.bfloat16)
    return x, w, b


def workload(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + b.reshape(1, -1, 1, 1)
    n, o, h, w_ = y.shape
    g = y.reshape(n, 16, o // 16, h, w_)
    mean = jnp.mean(g.astype(jnp.float32), axis=(2, 3, 4), keepdims=True)
    var = jnp.var(g.astype(jnp.float32), axis=(2, 3, 4), keepdims=True)
    z = ((g - mean.astype(y.dtype)) / jnp.sqrt(var.astype(y.dtype) + 1e-5)).reshape(y.shape)
    t = jnp.tanh(z)
    return jax.nn.logsumexp(y + t * jnp.minimum(jnp.maximum(t + 3, 0), 6) / 6, axis=1, keepdims=True)
'''


def _grouped(root: Path):
    ref = root / "grouped_reference.py"
    ref.write_text(GROUPED)
    program = describe(str(ref)).model_dump(mode="json")
    template, _, _ = build(program)
    small = template.render({k: v[0] for k, v in template.tunables.items()}, "program")
    mod = module(root / "grouped_ref.py", GROUPED)
    inputs = mod.create_inputs(size="small", key=3)
    want = np.asarray(mod.workload(*[np.asarray(a, np.float32) for a in inputs]), np.float32)
    own = float(np.max(np.abs(np.asarray(mod.workload(*inputs), np.float32) - want)))
    return program, template, small, inputs, want, own


def test_a_group_norm_pooled_over_the_channels_is_two_passes(tmp_path):
    """46k's form: the group statistics from pass 1's per-channel sums (a group's channels summed between
    the passes), pass 2 channels-in-sublanes ending in a [1, positions] row, stored lane-dense; the result
    [N, 1, H', W'] matches within the judge's rule (test-slow, below)."""
    program, template, small, *_ = _grouped(tmp_path)
    norm = plan(program)
    assert not isinstance(norm, str), norm
    assert norm.groups == 16 and len(norm.views) == 2 and norm.pooled
    assert template.tunables["rows_per_dot"] == (16, 8, 4) and template.initial["rows_per_dot"] < 16
    assert "lax.dot_general(" in small and "o_ref[0, i + g]" in small and "axis=0, keepdims=True" in small
    assert (
        "jnp.repeat(" in small and ".reshape(n, 16, o // 16).sum(axis=2)" in small
    )  # group stats, per channel


@pytest.mark.slow  # an interpret run at a check size (~12-25 s on 2 cores)
def test_a_group_norm_pooled_over_the_channels_matches_at_the_chosen_rows_per_dot(tmp_path):
    _, template, _, inputs, want, own = _grouped(tmp_path)
    fewer = template.render({k: v[0] for k, v in template.tunables.items()} | {"rows_per_dot": 4}, "program")
    got = interpret(tmp_path, "grouped_q4", fewer, inputs)  # the row group the cost model takes
    assert got.shape == want.shape == (2, 1, 38, 10) and np.max(np.abs(got - want)) <= 2 * own


@pytest.mark.slow  # three more interpret runs (~30 s on 2 cores)
def test_a_group_norm_with_wrong_group_statistics_fails(tmp_path):
    """16 rows a dot match too; group sums taken from one channel, or a group's statistic tiled over
    the channels (channel c reading group c % G, not c // (O / G)), fail the judge's rule."""
    _, _, small, inputs, want, own = _grouped(tmp_path)
    assert np.max(np.abs(interpret(tmp_path, "grouped", small, inputs) - want)) <= 2 * own  # 16 rows a dot
    tiled = re.sub(
        r"jnp\.repeat\(([^\n]*?), (o // \w+\.shape\[1\]), axis=1\)", r"jnp.tile(\1, (1, \2))", small
    )
    for broken in (small.replace(".reshape(n, 16, o // 16).sum(axis=2)", "[:, ::4]"), tiled):
        assert broken != small
        bad = interpret(tmp_path, f"grouped_{abs(hash(broken))}", broken, inputs)
        assert np.max(np.abs(bad - want)) > 2 * own  # the judge's rule: over twice the reference's own error


def test_a_reduction_over_the_channels_that_the_output_keeps_is_refused(tmp_path):
    """A softmax over the channels after the group norm: pass 2 pooled writes one row per position, so a
    result that keeps the channels is refused by name, not written wrong."""
    ref = tmp_path / "softmax_reference.py"
    ref.write_text(
        GROUPED.replace("jax.nn.logsumexp(", "jax.nn.softmax(").replace("axis=1, keepdims=True)", "axis=1)")
    )
    assert "jax.nn.softmax(" in ref.read_text()
    why = plan(describe(str(ref)).model_dump(mode="json"))
    assert isinstance(why, str) and "over the channels" in why, why
