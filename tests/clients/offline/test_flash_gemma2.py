"""Gemma 2's attention as the offline model's flash kernel: soft-capped scores, a mask the model computed.

Gemma 2 (gemma 2.0.8) writes its attention with grouped query heads (q reshaped to [B, T, K, G, H]),
its logits soft-capped (tanh(s / c) * c), and its mask built from inputs: the attention mask it is given,
ANDed with a sliding window around each token's position for the local layers; the key positions come
through a `lax.switch` on a constant. The flash template used to refuse all of it (the cond, the
reshape of the heads, the second scale, the input-dependent mask). The mask is now computed as the
reference computes it (outside the kernel, its own equations) and tiled with the scores, and its fill
replaces a masked score as the reference's select does: a row with every key masked averages all of v,
as the reference's softmax over equal fills does (the synthetic reference has such a row).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_paths import REFS

from maxkernel.clients.offline.classify import classify
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.fold import fold_constant_conds
from maxkernel.clients.offline.templates.flash_program import recognise
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.program import describe

# Gemma 2's shapes at full (tests/refs/gemma2_model.py: batch 2, 1024 tokens, 4 query heads on 2 kv
# heads of 64), f32 as the model runs; a cap of 2 so that the soft-cap bites on unit-scale logits
REF = """
import jax
import jax.numpy as jnp
from jax import lax

SIZES = {"full": {"b": 2, "s": 1024}, "small": {"b": 1, "s": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    k = jax.random.split(key, 3)
    q = jax.random.normal(k[0], (s["b"], s["s"], 4, 64))
    kv = jax.random.normal(k[1], (2, s["b"], s["s"], 2, 64))
    pos = jnp.broadcast_to(jnp.arange(s["s"], dtype=jnp.int32), (s["b"], s["s"]))
    causal = jnp.tril(jnp.ones((s["s"], s["s"]), bool))
    mask = causal & jax.random.bernoulli(k[2], 0.9, (s["b"], s["s"], s["s"]))
    mask = mask.at[:, 3, :].set(False)  # a query that sees no key: the reference averages all of v
    return q, pos, kv, mask


def workload(q, pos, kv, mask):
    b, t, n, h = q.shape
    key, value = kv[0], kv[1]
    query = (q * h**-0.5).reshape(b, t, 2, n // 2, h)
    logits = jnp.einsum("BTKGH,BSKH->BTKGS", query, key).reshape(b, t, n, t)
    logits = jnp.tanh(logits / 2.0) * 2.0
    kv_pos = lax.switch(1, (lambda: jnp.zeros((t,), jnp.int32), lambda: jnp.arange(t, dtype=jnp.int32)))
    near = (kv_pos[None, None, :] > pos[:, :, None] - t // 4) & (kv_pos[None, None, :] < pos[:, :, None] + t // 4)
    keep = (mask & near) if WINDOWED else mask
    logits = jnp.where(keep[:, :, None, :], logits, -2.3819763e38)
    probs = jax.nn.softmax(logits, axis=-1).reshape(b, t, 2, n // 2, t)
    return jnp.einsum("BTKGS,BSKH->BTKGH", probs, value).reshape(b, t, n, h)
"""


def reference(tmp_path: Path, windowed: bool) -> tuple[Path, dict]:
    path = tmp_path / f"gemma_attn_{'local' if windowed else 'global'}.py"
    path.write_text(REF.replace("WINDOWED", str(windowed)))
    return path, describe(str(path)).model_dump(mode="json")


def test_the_switch_folds_and_the_mask_the_cap_and_the_head_groups_are_recognised(tmp_path):
    _, program = reference(tmp_path, windowed=True)
    assert "cond" in program["census"] and classify(program).kind == "none"
    folded = fold_constant_conds(program)
    assert "cond" not in folded["census"] and classify(folded).kind == "attention"
    r = recognise(folded)
    assert r is not None and not r["causal"] and r["n_groups"] == 1
    assert r["ops"] == ["scale_div", "tanh", "scale", "mask"]  # the cap around tanh, then the mask
    assert r["mask"]["fill"] == pytest.approx(-2.3819763e38) and r["mask"]["batch"] == [0]  # per batch row
    # the mask's own equations (positions, the window, the switch's branch) run outside the kernel
    prims = {folded["equations"][i]["primitive"] for i in r["mask_prefix"]}
    assert {"iota", "gt", "lt", "and"} <= prims


def test_the_kernel_compiles_at_full(tmp_path):
    """The real Mosaic compiler for v5e at Gemma 2's full shapes (a few seconds)."""
    ref, program = reference(tmp_path, windowed=True)
    source = first_kernel(program, get_chip("tpu-v5e"))
    assert "template=flash_program" in source and "jnp.tanh(s)" in source
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    with WorkerPool(max_workers=1) as pool:
        full = Evaluator(pool, timeout_s=300).compile(str(kernel), str(ref), "tpu-v5e", "full")
    assert full.ok, full.failure


@pytest.mark.slow  # interpret mode; Gemma 2 traced, both attention regions extracted, each kernel checked
def test_the_kernels_match_the_synthetic_and_gemma2s_own_attention_by_default(tmp_path):
    """The synthetic reference (its fully masked row included) in TPU interpret mode at small, then
    Gemma 2's local and global attention regions, each validated with default flags."""
    pytest.importorskip("gemma", reason="gemma is installed by make test-slow (the Makefile's models stamp)")
    from maxkernel.tpu_tools.model.extract import extract_region

    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool, timeout_s=600)
        ref, program = reference(tmp_path, windowed=True)
        kernel = tmp_path / "synthetic_kernel.py"
        kernel.write_text(first_kernel(program, get_chip("tpu-v5e")))
        report = ev.validate(str(kernel), str(ref), "tpu-v5e", "small", seeds=2)  # its target's numerics
        assert report.ok, report.failure
        for region in ("Transformer.layer_{0,2}.attn", "Transformer.layer_{1,3}.attn"):
            _, text = extract_region(str(REFS / "gemma2_model.py"), region)
            ref = tmp_path / "attn.py"
            ref.write_text(text)
            source = first_kernel(describe(str(ref)).model_dump(mode="json"), get_chip("tpu-v5e"))
            assert "template=flash_program" in source, region
            kernel = tmp_path / "kernel.py"
            kernel.write_text(source)
            report = ev.validate(str(kernel), str(ref), "tpu-v5e", "full")  # small, derived, the probe
            assert report.ok, (region, report.failure)
            assert any(c.what == "compile" and c.size == "full" and c.ok for c in report.checks), (
                report.checks
            )
