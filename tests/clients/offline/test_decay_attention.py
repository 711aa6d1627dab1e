"""Decay-masked linear attention (RetNet retention, Mamba-2's quadratic SSD) becomes a blocked two-pass kernel.

The matmul template held the whole [N, S, S] f32 score matrix per step, which does not fit VMEM at S =
4096. The decay_attention template re-emits the reference's decay on [block_q, block_kv] tiles (iotas
offset by the tile's position, the grid's batch index for a per-head constant, Mamba-2's cumsum'd
vector read per q and kv block), accumulates the row statistic in pass 1 and (scores / norm) · v in
pass 2. kv blocks above the diagonal are skipped only where the tiles are provably 0 there: a decay
whose mask is not exactly causal must keep every block, or the kernel would be silently wrong.

The kernels run here in interpret mode at 128-wide blocks, several blocks a row (and a partial last
one), against the reference's own workload.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.templates.decay_attention import build, recognise
from maxkernel.tpu_tools.hardware.chips import get_chip
from tests.clients.offline._modules import load, program_of

CHIP = get_chip("tpu-v6e")
TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
RETNET, SSD = TASKS / "15p_RetNet_Retention.py", TASKS / "16p_Mamba2_SSD.py"


def kernel_module(ref: Path, tmp_path: Path, passes: int, block: int = 128):
    """The template's kernel for `ref` at `block`-wide blocks, in interpret mode."""
    program = program_of(ref)
    t = build(program, Symbolic(program))
    assert t is not None
    config = {"block_q": block, "block_kv": block, "passes": passes}
    source = t.render(config, "program").replace("interpret=False", "interpret=True")
    path = tmp_path / f"{ref.stem}_kernel.py"
    path.write_text(source)
    return load(path, f"{ref.stem}_kernel"), source


def inputs(ref: Path, batch: int, heads: int, seq: int, dim: int) -> tuple:
    ks = jax.random.split(jax.random.key(3), 4)
    qkv = tuple(
        jax.random.normal(k, (batch, heads, seq, dim), jnp.float32).astype(jnp.bfloat16) for k in ks[:3]
    )
    if ref == SSD:
        return (*qkv, jax.random.normal(ks[3], (batch, heads, seq), jnp.float32) * 0.5 - 4.0)
    return qkv


def test_retention_and_ssd_are_recognised_with_their_decay_vectors_and_the_causal_skip():
    retnet, ssd = recognise(program_of(RETNET)), recognise(program_of(SSD))
    assert retnet["causal"] and retnet["two_pass"] and retnet["cuts"] == {}  # all from iotas in the tiles
    assert ssd["causal"] and ssd["two_pass"]
    # the cumsum'd log-decay is computed outside once and read as a query and a kv vector
    roles = [tuple(lab) for labs in ssd["cuts"].values() for lab in labs]
    assert sorted(roles, key=str) == [(("B", 0), ("B", 1), "Q", None), (("B", 0), ("B", 1), None, "K")]
    source = first_kernel(program_of(RETNET), CHIP)
    assert "template=decay_attention" in source and "CAUSAL = True" in source
    # two walks of the tiles, rounding (scores / norm) as the reference does: one pass, which rounds the
    # scores before the division, fails the judge's oracle rule on 15p's channel_scales inputs
    assert "PASSES = 2" in source and "BLOCK_Q = 1024\nBLOCK_KV = 1024" in source


NOT_CAUSAL = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"b": 1, "h": 2, "s": 2048}, "small": {"b": 1, "h": 2, "s": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ks = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, (s["b"], s["h"], s["s"], 128), jnp.float32).astype(jnp.bfloat16) for k in ks)


def workload(query, key, value):
    s = query.shape[2]
    i = jnp.arange(s)[:, None]
    j = jnp.arange(s)[None, :]
    decay = jnp.exp(-0.01 * jnp.abs(i - j).astype(jnp.float32)) * MASK
    scores = jnp.einsum("bhqd,bhkd->bhqk", query.astype(jnp.float32), key.astype(jnp.float32)) * decay
    norm = jnp.maximum(jnp.sum(jnp.abs(scores), axis=-1, keepdims=True), 1.0)
    return jnp.einsum("bhqk,bhkd->bhqd", (scores / norm).astype(value.dtype), value)
"""


@pytest.mark.parametrize("mask", ["(i <= j)", "(i >= j - 1)", "1.0"])
def test_a_decay_that_is_not_zero_above_the_diagonal_keeps_every_block(mask, tmp_path):
    ref = tmp_path / "two_sided.py"
    ref.write_text(NOT_CAUSAL.replace("MASK", mask))
    r = recognise(program_of(ref))
    assert r is not None and not r["causal"]  # skipping blocks above the diagonal would drop real scores
    below = tmp_path / "below.py"
    below.write_text(NOT_CAUSAL.replace("MASK", "(i >= j)"))
    assert recognise(program_of(below))["causal"]


@pytest.mark.parametrize(
    ("ref", "seq", "passes"),
    [(RETNET, 384, 1), (RETNET, 384, 2), pytest.param(SSD, 320, 1, marks=pytest.mark.slow)],  # SSD: ~12 s
)
def test_the_blocked_kernel_matches_the_reference_across_skipped_and_partial_blocks(
    ref, seq, passes, tmp_path
):
    # 3 q x 3 kv blocks of 128 (320: the last one partial), 2 batches x 2 heads: the per-head decay comes
    # from the grid's batch index, the diagonal blocks are computed, the ones above it skipped
    kernel, source = kernel_module(ref, tmp_path, passes)
    assert "CAUSAL = True" in source
    args = inputs(ref, 2, 2, seq, 256 if ref == RETNET else 64)
    want = np.asarray(load(ref, ref.stem.replace("p_", "_")).workload(*args).astype(jnp.float32))
    got = np.asarray(kernel.workload(*args).astype(jnp.float32))
    assert got.shape == want.shape
    # two passes round as the reference rounds; one rounds the scores before the division (ulps apart)
    np.testing.assert_allclose(got, want, atol=2e-2 if passes == 2 else 1e-1, rtol=2e-2)
    # the same kernel with its query positions one block off (a wrong decay and mask) is far off
    wrong = source.replace("+ qi * bq  # iota along Q", "+ (qi + 1) * bq  # iota along Q")
    assert wrong != source
    (tmp_path / "wrong.py").write_text(wrong)
    bad = np.asarray(load(tmp_path / "wrong.py", "wrong_kernel").workload(*args).astype(jnp.float32))
    assert not np.allclose(bad, want, atol=0.1)  # (NaN where an unmasked exp overflows)
    if ref == RETNET:  # and with the diagonal's kv block skipped as if it were above the diagonal
        early = source.replace("(qi * block_q + block_q - 1) // block_kv", "(qi * block_q) // block_kv - 1")
        assert early != source
        (tmp_path / "early.py").write_text(early)
        bad = np.asarray(load(tmp_path / "early.py", "early_kernel").workload(*args).astype(jnp.float32))
        assert not np.allclose(bad, want, atol=0.1)


@pytest.fixture(scope="module")
def evaluator():
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=900)


@pytest.mark.slow  # the judge at the check sizes (interpret mode) and the Mosaic compile at S = 4096
@pytest.mark.parametrize("ref", [RETNET, SSD], ids=["15p", "16p"])
def test_the_first_kernel_passes_the_judge_and_compiles_at_full(ref, tmp_path, evaluator):
    # the matmul template's [N, S, S] f32 score block did not fit VMEM at full; the score tiles do
    kernel = tmp_path / "kernel.py"
    kernel.write_text(first_kernel(program_of(ref), CHIP))
    assert "template=decay_attention" in kernel.read_text()
    full = evaluator.compile(str(kernel), str(ref), "tpu-v6e", "full")
    assert full.ok, full.failure
    report = evaluator.validate(str(kernel), str(ref), "cpu", None, seeds=1)
    assert report.ok, report.failure.summary
