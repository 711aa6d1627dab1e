"""Attention programs become an online-softmax (flash) kernel: K/V tiled over kv, any layout.

The whole-score attention template cannot hold a 4096 x 4096 score matrix per step at production
sizes; the flash form walks kv blocks with f32 running max / sum / accumulator. The roles of the axes
come from the program (dot dimension numbers, the softmax's axis, the mask's broadcast), so a layout
the template never saw by name (BSHD, grouped query heads) still maps. A mask that is not exactly
causal (a sliding window) must not be taken for causal: that kernel would be silently wrong.

A reference that rounds its normalised probabilities to bf16 before p·v (softmax in f32, then a cast)
is matched by walking kv twice, so that the kernel rounds the same numbers: one pass rounds the
unnormalised exp instead, and where p·v cancels (mixed signs, large values) those roundings differ by
far more than the tolerance. The tester's `mixed_sign` case at scale 4 found this on Llama's attention.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.templates.flash_program import build, recognise
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.program import describe

CHIP = get_chip("tpu-v6e")
TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
ATTN = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"b": 2, "s": 2048, "h": 8}, "small": {"b": 1, "s": 256, "h": 2}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ks = jax.random.split(key, 3)
    shape = (s["b"], s["s"], s["h"], 128)  # BSHD
    return tuple(jax.random.normal(k, shape, jnp.float32).astype(jnp.bfloat16) for k in ks)


def workload(q, k, v):
    s = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (128**-0.5)
    MASK
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
"""
CAUSAL = "scores = jnp.where(jnp.tril(jnp.ones((s, s), dtype=bool)), scores, -1e9)"
PLAIN = "pass"
ZERO_FILL = "scores = jnp.where(jnp.tril(jnp.ones((s, s), dtype=bool)), scores, 0.0)"
WINDOW = (
    "i = jnp.arange(s)\n    keep = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 64)\n"
    "    scores = jnp.where(keep, scores, -1e9)"
)


ROUNDED = "jax.nn.softmax(scores, axis=-1)"  # replaced below: softmax in f32, rounded to bf16


def write(tmp_path: Path, name: str, mask: str, *, rounded: bool = False) -> Path:
    path = tmp_path / f"{name}_ref.py"
    text = ATTN.replace("MASK", mask)
    if rounded:  # as Llama's attention: f32 scores, an f32 softmax rounded to bf16 for p·v
        text = text.replace(
            '"bqhd,bkhd->bhqk", q, k)', '"bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)'
        )
        text = text.replace(ROUNDED, "jax.nn.softmax(scores, axis=-1).astype(jnp.bfloat16)")
    path.write_text(text)
    return path


def test_two_passes_exactly_when_the_reference_rounds_the_normalised_probabilities(tmp_path):
    plain = recognise(describe(str(write(tmp_path, "p", CAUSAL))).model_dump(mode="json"))
    rounded = recognise(describe(str(write(tmp_path, "r", CAUSAL, rounded=True))).model_dump(mode="json"))
    assert plain is not None and plain["two_pass"] is False
    assert rounded is not None and rounded["two_pass"] is True


@pytest.mark.slow
def test_the_two_pass_kernel_rounds_as_the_reference_and_lands_closer_than_one_pass(tmp_path, evaluator):
    ref = write(tmp_path, "rounded", CAUSAL, rounded=True)
    source = first_kernel(describe(str(ref)).model_dump(mode="json"), CHIP)
    assert "TWO_PASS = True" in source
    two, one = tmp_path / "two.py", tmp_path / "one.py"
    two.write_text(source)
    one.write_text(source.replace("TWO_PASS = True", "TWO_PASS = False"))
    cancelling = InputCase(name="mixed_sign_large", distribution="mixed_sign", scale=4.0)
    partial = InputCase(name="partial_kv", sizes={"b": 1, "s": 640, "h": 1})
    for case in (None, partial):
        report = evaluator.validate(str(two), str(ref), "cpu", "small", seeds=2, case=case)
        assert report.ok, (case, report.failure.summary)
    # on the same cancelling inputs, the two-pass kernel passes and lands closer to the reference than its
    # one-pass twin (which the task's own atol failed by up to 0.5; the judge now widens a case's atol by
    # the reference's own movement under a one-ulp nudge, so the twin's verdict depends on that width)
    two_r = evaluator.validate(str(two), str(ref), "cpu", "small", seeds=2, seed_offset=7, case=cancelling)
    one_r = evaluator.validate(str(one), str(ref), "cpu", "small", seeds=2, seed_offset=7, case=cancelling)
    assert two_r.ok, two_r.failure.summary
    assert max(r.max_abs_err for r in two_r.per_seed) < max(r.max_abs_err for r in one_r.per_seed)


def test_the_axes_roles_come_from_the_program_in_every_layout():
    one = recognise(describe(str(TASKS / "1p_Flash_Attention" / "__init__.py")).model_dump(mode="json"))
    assert one["causal"] and one["n_groups"] == 0 and one["q_perm"] == [0, 1, 2, 3]  # BHSD
    gqa = recognise(describe(str(TASKS / "2p_GQA_Attention" / "__init__.py")).model_dump(mode="json"))
    # q reshaped to [b, s, kv_heads, group, d]: batch (b, kv_heads), then the group, then s, then d
    assert gqa["causal"] and gqa["n_groups"] == 1 and gqa["q_perm"] == [0, 2, 3, 1, 4]
    assert gqa["k_perm"] == [0, 2, 1, 3] and gqa["q"] != gqa["k"]


def test_a_mask_that_is_not_exactly_causal_is_not_taken_for_causal(tmp_path):
    program = describe(str(write(tmp_path, "window", WINDOW))).model_dump(mode="json")
    assert recognise(program) is None and build(program, Symbolic(program)) is None
    plain = recognise(describe(str(write(tmp_path, "plain", PLAIN))).model_dump(mode="json"))
    assert plain is not None and not plain["causal"]


def test_a_mask_whose_fill_still_carries_weight_is_refused(tmp_path):
    program = describe(str(write(tmp_path, "zero", ZERO_FILL))).model_dump(mode="json")
    assert recognise(program) is None  # exp(0 - max) is not 0: skipping those blocks would be wrong


def test_a_score_bias_input_is_tiled_with_the_scores():
    flex = recognise(describe(str(TASKS / "5p_Flex_Attention.py")).model_dump(mode="json"))
    # rel_pos_bias [H, S, S] added to scores [B, H, S, S]: it varies over the trailing batch axis (H)
    assert flex["bias"] == {"input": "x3", "perm": [0, 1, 2]} and flex["ops"] == ["scale", "bias"]


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=600)


@pytest.mark.slow
@pytest.mark.parametrize("mask", ["causal", "plain"])
def test_flash_validates_at_small_and_a_partial_kv_block_and_compiles_at_full(mask, tmp_path, evaluator):
    ref = write(tmp_path, mask, CAUSAL if mask == "causal" else PLAIN)
    source = first_kernel(describe(str(ref)).model_dump(mode="json"), CHIP)
    assert "template=flash_program" in source and "pl.when(step == 0)" in source
    assert f"CAUSAL = {mask == 'causal'}" in source
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    block = int(source.split("BLOCK_KV = ")[1].split()[0])
    assert block == 1024  # chosen for the target (s = 2048); 1152 = 1024 + a partial block of 128
    for case in (None, InputCase(name="partial_kv", sizes={"b": 1, "s": 1152, "h": 1})):
        report = evaluator.validate(str(kernel), str(ref), "cpu", "small", seeds=1, case=case)
        assert report.ok, report.failure
    full = evaluator.compile(str(kernel), str(ref), "tpu-v6e", "full")
    assert full.ok, full.failure


FUSED_QKV = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"b": 4, "s": 2048, "h": 16}, "small": {"b": 1, "s": 256, "h": 2}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    return (jax.random.normal(key, (s["b"], s["s"], 3 * s["h"] * 64), jnp.float32).astype(jnp.bfloat16),)


def workload(qkv):
    b, s, _ = qkv.shape
    q, k, v = (t[:, :, 0] for t in jnp.split(qkv.reshape(b, s, 3, -1, 64), 3, axis=2))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / 64**0.5
    logits = jnp.where(jnp.tril(jnp.ones((s, s), bool)), logits, -1e30)
    p = jax.nn.softmax(logits, axis=-1).astype(jnp.bfloat16)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, -1)
"""


def test_a_fused_qkv_split_and_a_divided_scale_are_plain_attention(tmp_path):
    # Flax's attention as users write it (and as `extract` cuts it from a Flax block): q, k, v split from
    # one projection, the scores divided by sqrt(d); both used to leave the whole-score template in place.
    path = tmp_path / "fused_qkv.py"
    path.write_text(FUSED_QKV)
    program = describe(str(path)).model_dump(mode="json")
    r = recognise(program)
    assert r is not None and r["causal"] and r["ops"] == ["scale_div"] and r["two_pass"]
    assert {program["equations"][i]["primitive"] for i in r["prefix"]} >= {"split", "squeeze", "reshape"}
    source = first_kernel(program, CHIP)
    assert "template=flash_program" in source and "s = s / " in source


@pytest.mark.slow  # interpret-mode validation at the check sizes and a compile at the production size
def test_the_fused_qkv_flash_kernel_validates_and_compiles_at_full(tmp_path, evaluator):
    ref = tmp_path / "fused_qkv.py"
    ref.write_text(FUSED_QKV)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(first_kernel(describe(str(ref)).model_dump(mode="json"), CHIP))
    assert evaluator.compile(str(kernel), str(ref), "tpu-v6e", "full").ok
    report = evaluator.validate(str(kernel), str(ref), "cpu", None, seeds=1)
    assert report.ok, report.failure.summary


# the same attention with q, k, v in [B, H, S, D]: the sequence already second-to-last, so the transposes
# to the sequence-on-lanes layout would be copies around the kernel (JaxBench's 1p: 1563 us of 9650)
BHSD = (
    ATTN.replace('(s["b"], s["s"], s["h"], 128)  # BSHD', '(s["b"], s["h"], s["s"], 128)  # BHSD')
    .replace("s = q.shape[1]", "s = q.shape[2]")
    .replace('"bqhd,bkhd->bhqk"', '"bhqd,bhkd->bhqk"')
    .replace('"bhqk,bkhd->bqhd"', '"bhqk,bhkd->bhqd"')
)


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def outside_transposes(source: str) -> list[str]:
    """The workload's transposes that move an axis (an identity permutation is no copy)."""
    body = source.split("def workload(")[1]
    perms = (ast.literal_eval(p) for p in re.findall(r"jnp\.transpose\(.*, (\([\d, ]+\))\)", body))
    return [str(p) for p in perms if list(p) != sorted(p)]


def test_a_bhsd_reference_reads_row_tiles_with_no_transpose_outside_and_bshd_keeps_the_lanes_layout(tmp_path):
    assert BHSD != ATTN
    rows = first_kernel(
        describe(str(write_text(tmp_path / "bhsd.py", BHSD.replace("MASK", CAUSAL)))).model_dump(mode="json"),
        CHIP,
    )
    assert outside_transposes(rows) == []
    assert "pl.BlockSpec((sq, bkv, d), kv_map)" in rows and "(k, q, (((1,), (1,)), ((), ())))" in rows
    lanes = first_kernel(describe(str(write(tmp_path, "bshd", CAUSAL))).model_dump(mode="json"), CHIP)
    assert len(outside_transposes(lanes)) == 3  # q, k, v to [.., D, S]: free in XLA's layout of BSHD
    assert "pl.BlockSpec((sq, d, bkv), kv_map)" in lanes
    one = first_kernel(
        describe(str(TASKS / "1p_Flash_Attention" / "__init__.py")).model_dump(mode="json"), CHIP
    )
    assert outside_transposes(one) == [] and "BLOCK_Q = 1024\nBLOCK_KV = 1024" in one  # fewer, fuller steps


@pytest.mark.slow
@pytest.mark.parametrize("rounded", [False, True])
def test_the_row_tile_kernel_validates_with_a_partial_kv_block_and_compiles_at_full(
    rounded, tmp_path, evaluator
):
    text = BHSD.replace("MASK", CAUSAL)
    if rounded:  # two passes, as Llama's attention: the normalised probabilities rounded to bf16
        text = text.replace(
            '"bhqd,bhkd->bhqk", q, k)', '"bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32)'
        )
        text = text.replace(ROUNDED, "jax.nn.softmax(scores, axis=-1).astype(jnp.bfloat16)")
    ref = write_text(tmp_path / "bhsd_ref.py", text)
    source = first_kernel(describe(str(ref)).model_dump(mode="json"), CHIP)
    assert outside_transposes(source) == [] and f"TWO_PASS = {rounded}" in source
    kernel = write_text(tmp_path / "kernel.py", source)
    block = int(source.split("BLOCK_KV = ")[1].split()[0])
    for case in (None, InputCase(name="partial_kv", sizes={"b": 1, "s": block + 128, "h": 1})):
        report = evaluator.validate(str(kernel), str(ref), "cpu", "small", seeds=1, case=case)
        assert report.ok, report.failure
    full = evaluator.compile(str(kernel), str(ref), "tpu-v6e", "full")
    assert full.ok, full.failure
