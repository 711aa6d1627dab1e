"""Compose kernels into a model step, validated end to end as a candidate (small check size)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.model.compose import compose, parse_kernels

# A hand-written attention for the Llama layer's `attention.sdpa` region (its inputs: q, k, v after RoPE).
SDPA = """
import jax
import jax.numpy as jnp


def workload(q, k, v):
    b, s, h, d = q.shape
    kv = k.shape[2]
    qg = q.reshape(b, s, kv, h // kv, d)
    scores = jnp.einsum("bskgd,btkd->bkgst", qg, k, preferred_element_type=jnp.float32) * d**-0.5
    if CAUSAL:
        scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgst,btkd->bskgd", probs, v).reshape(b, s, h * d).astype(OUT)
"""


def kernel(tmp_path, name, causal=True, out="v.dtype"):
    path = tmp_path / f"{name}.py"
    path.write_text(SDPA.replace("CAUSAL", str(causal)).replace("OUT", out))
    return parse_kernels([f"attention.sdpa={path}"])


@pytest.fixture(scope="module")
def evaluator():
    return Evaluator(timeout_s=600)


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_a_correct_kernel_composes_and_matches_the_model(tmp_path, evaluator):
    r = compose(evaluator, "llama3_8b_layer", kernel(tmp_path, "ok"), str(tmp_path / "out"), target="cpu")
    assert r.ok, r.verdict
    assert "matches the model on seeds" in r.verdict and r.verdict.endswith(" at small")
    # compiled at the model's production size, interpreted at the one check size the composed file carries
    assert r.validation["size"] == "full" and [c["name"] for c in r.validation["check_sizes"]] == ["small"]
    text = (tmp_path / "out" / "composed.py").read_text()
    assert (
        "_kernel('attention.sdpa'" in text and "llama3_8b_layer import" not in text and "jaxbench" not in text
    )
    # no TPU target, no estimate: the report says why instead of a number
    assert r.estimate is None and "not a TPU target" in r.estimate_note


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_the_estimate_is_amdahls_sum_of_the_hotspots_and_the_kernels_estimate(tmp_path, evaluator):
    """At the target size on v5e: before = the region's hotspot estimate x count, after = the kernel's
    static estimate on the extracted region x count, the step by Amdahl; labeled estimate, with its tier."""
    from maxkernel.tpu_tools.model.hotspots import hotspots_in_child

    hs = hotspots_in_child(evaluator, "llama3_8b_layer", "tpu-v5e", "small")
    r = compose(
        evaluator, "llama3_8b_layer", kernel(tmp_path, "ok"), str(tmp_path / "out"), target="tpu-v5e",
        size="small", hotspots=hs,
    )  # fmt: skip
    assert r.ok, r.verdict
    assert r.validation["size"] == "small"  # compiled for v5e at the target size asked for
    e = r.estimate
    assert e is not None and e.basis == "estimate" and (e.target, e.size) == ("tpu-v5e", "small")
    # the step from the hotspot table (its compile's LLO dump) and this plain-JAX kernel from its own, whole:
    # both at the compiler's schedule (llo)
    assert e.tier == "step: llo; kernels: llo"
    (row,) = e.regions
    sdpa = hs.region("attention.sdpa")
    assert (row.region, row.count) == ("attention.sdpa", sdpa.region.count)
    assert row.before_each_us == sdpa.time_us and row.before_us == sdpa.total_us
    # after: this kernel is plain JAX (no pallas_call): XLA compiles it into the step as it compiles the
    # region, so it counts as the region's own time; its estimate alone (a program of its own, with a
    # launch, without its neighbours' fusions) is said in the row's note. A Pallas kernel's after is its
    # estimate less the launch (test_library_models' Griffin with recurrentgemma's Pallas scan)
    again = evaluator.estimate(row.kernel, row.reference, "tpu-v5e", "small")
    assert again.ok and not again.estimate.per_call and row.after_each_us == row.before_each_us
    assert f"alone it is {again.estimate.estimated_time_us:.4g} us" in row.note, row.note
    assert row.after_us == row.after_each_us * row.count and row.after_tier == again.estimate.tier
    assert e.step_before_us == hs.step_us
    assert e.step_after_us == pytest.approx(hs.step_us - row.before_us + row.after_us)
    assert e.speedup == pytest.approx(hs.step_us / e.step_after_us)
    assert (
        f"{hs.step_us:.4g} - {row.before_us:.4g} + {row.after_us:.4g} = {e.step_after_us:.4g} us"
        in e.arithmetic
    )
    assert any("nothing ran on a chip" in n for n in e.notes)
    # beside Amdahl, the composed step compiled and estimated as one program: with this plain-JAX kernel it is
    # the model's own computation re-emitted, so XLA compiles it as it compiles the model
    assert e.composed_us is not None and e.composed_us > 0
    assert e.composed_speedup == pytest.approx(hs.step_us / e.composed_us)
    # the composed program and the hotspot step are each costed from their own compile's LLO dump: the same
    # tier, and with the model's own computation re-emitted, the same time
    assert e.composed_tier == "llo" == hs.tier and f"(tier {e.composed_tier})" in e.composed_note
    assert e.composed_us == pytest.approx(hs.step_us, rel=0.1), e.composed_note
    assert (
        f"{e.composed_us:.4g} us" in e.composed_note
        and f"Amdahl's {e.step_after_us:.4g} us" in e.composed_note
    )


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_a_kernel_wrong_only_without_the_causal_mask_fails_end_to_end(tmp_path, evaluator):
    r = compose(
        evaluator,
        "llama3_8b_layer",
        kernel(tmp_path, "nomask", causal=False),
        str(tmp_path / "out"),
        target="cpu",
    )
    assert not r.ok and "does not match the model" in r.verdict and "outside atol" in r.verdict


def test_bad_input_is_one_usage_error_and_nothing_is_written(tmp_path, evaluator):
    out = tmp_path / "out"
    # caught where the composed step compiles first: at the model's production size
    with pytest.raises(UsageError, match=r"returns \[\(\[1, 8192, 4096\], 'float32'\)\]; the region makes"):
        compose(
            evaluator, "llama3_8b_layer", kernel(tmp_path, "f32", out="jnp.float32"), str(out), target="cpu"
        )
    assert not out.exists()
    with pytest.raises(UsageError, match=r"no region 'nope' in llama3_8b_layer"):
        compose(evaluator, "llama3_8b_layer", {"nope": str(tmp_path / "f32.py")}, str(out), target="cpu")
    assert not out.exists()
    with pytest.raises(UsageError, match="expected ID=kernel.py"):
        parse_kernels(["attention.sdpa"])


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path):
    k = tmp_path / "k.py"
    k.write_text(SDPA.replace("CAUSAL", "True").replace("OUT", "v.dtype"))
    cases = [
        (["--kernel", f"nope={k}"], "no region 'nope'"),
        (["--kernel", f"attention.sdpa={tmp_path / 'missing.py'}"], "kernel file not found"),
    ]
    for argv, message in cases:
        p = subprocess.run(
            [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "compose", "llama3_8b_layer", *argv,
             "--target", "cpu", "--out", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("maxkernel")]
        assert p.returncode == 2 and len(lines) == 1 and message in lines[0], (argv, p.stderr[-2000:])
    assert not (tmp_path / "out").exists()
