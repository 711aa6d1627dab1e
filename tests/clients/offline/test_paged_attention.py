"""The paged-attention template: recognised from a traced program whose k and v are `cache[page_table]`,
its kernel DMAs whole pages by the table and matches the reference on ragged lengths and padded blocks."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.templates import flash_program
from maxkernel.clients.offline.templates.paged_attention import build, recognise_paged
from maxkernel.tpu_tools.hardware.chips import get_chip
from tests.clients.offline._modules import load, program_of

TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
PAGED = TASKS / "6p_Paged_Attention.py"


def test_6p_is_recognised_as_paged_and_its_kernel_never_gathers_the_caches():
    program = program_of(PAGED)
    r = recognise_paged(program)
    assert r is not None
    assert (r["paged_k"]["cache"], r["paged_v"]["cache"]) == ("x1", "x2")  # k_pages, v_pages
    assert r["mask"] is not None and not r["mask"]["has_q"]  # the length mask: kv axis and sequence only
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert "template=paged_attention" in source
    assert "lax.gather(x1" not in source and "lax.gather(x2" not in source  # pages come by DMA
    assert "num_scalar_prefetch=2" in source and "make_async_copy(k_hbm.at[tk_ref" in source
    # the flash recogniser still refuses a mask without a query axis unless asked for decode
    assert flash_program.recognise(program) is None


PAGED_REF = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 8, "p": 64}, "small": {"n": 2, "p": 8}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    ks = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(ks[0], (s["n"], 16, 128), jnp.bfloat16)
    kc = jax.random.normal(ks[1], (s["n"] * s["p"], 16, 2, 128), jnp.bfloat16)
    vc = jax.random.normal(ks[2], (s["n"] * s["p"], 16, 2, 128), jnp.bfloat16)
    return q, kc, vc, jnp.arange(s["n"] * s["p"], dtype=jnp.int32).reshape(s["n"], s["p"])


def workload(q, kc, vc, table):
    def one(q_row, pages):
        k = GATHER_K.reshape(-1, 2, 128)
        v = vc[pages].reshape(-1, 2, 128)
        s = jnp.einsum("hgd,phd->hgp", q_row.reshape(2, 8, 128), k)
        return jnp.einsum("hgp,phd->hgd", jax.nn.softmax(s, axis=-1), v).reshape(16, 128)
    return jax.vmap(one)(q, table)
"""


@pytest.mark.parametrize(
    ("gather_k", "paged"),
    [
        ("kc[pages]", True),  # no mask at all: every page counts
        # out-of-range pages read a fill value, not the clamped page the kernel's table would fetch
        ('kc.at[pages].get(mode="fill", fill_value=0)', False),
        ("kc[pages % 4]", True),  # the table is computed from an input: the glue computes it too
        ("kc[:, ::-1][pages]", False),  # the cache is reversed first: the kernel only DMAs pages as they lie
    ],
)
def test_only_a_gather_of_whole_pages_the_kernel_can_fetch_as_they_lie_is_taken(gather_k, paged, tmp_path):
    ref = tmp_path / "paged_ref.py"
    ref.write_text(PAGED_REF.replace("GATHER_K", gather_k))
    assert (recognise_paged(program_of(ref)) is not None) is paged


def _inputs(n_seq: int, pps: int, kv_lens: list[int], dtype) -> tuple:
    """6p's inputs at a CPU size: 16 query heads over 2 kv heads (groups of 8, as 6p), a shuffled table."""
    ks = jax.random.split(jax.random.key(7), 4)
    pages = (n_seq * pps, 16, 2, 128)
    q = jax.random.normal(ks[0], (n_seq, 16, 128), jnp.float32).astype(dtype)
    kc = jax.random.normal(ks[1], pages, jnp.float32).astype(dtype)
    vc = jax.random.normal(ks[2], pages, jnp.float32).astype(dtype)
    table = jax.random.permutation(ks[3], n_seq * pps).astype(jnp.int32).reshape(n_seq, pps)
    cu = jnp.arange(n_seq + 1, dtype=jnp.int32)
    return q, kc, vc, jnp.asarray(kv_lens, jnp.int32), table, cu


@pytest.mark.slow  # TPU interpret mode (race detection on): ~8 grid steps of DMAs and semaphores
def test_the_kernel_matches_the_reference_on_ragged_lengths_shuffled_pages_and_a_padded_block(tmp_path):
    program = program_of(PAGED)
    t = build(program, Symbolic(program))
    # 6 pages a sequence in blocks of 4: the second block is padded with page 0, its columns never count
    source = t.render({"pages_per_block": 8}, "program").replace("PAGES_PER_BLOCK = 8", "PAGES_PER_BLOCK = 4")
    source = source.replace("interpret=False", "interpret=pltpu.InterpretParams(detect_races=True)")
    path = tmp_path / "paged_kernel.py"
    path.write_text(source)
    kernel, ref = load(path, "paged_kernel"), load(PAGED, "paged_ref_6p")
    args = _inputs(3, 6, [96, 40, 1], jnp.bfloat16)  # a full sequence, one ending mid-page, one token
    got = np.asarray(kernel.workload(*args).astype(jnp.float32))
    oracle = np.asarray(
        ref.workload(*(a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a for a in args))
    )
    same_precision = np.asarray(ref.workload(*args).astype(jnp.float32))
    assert got.shape == oracle.shape == (3, 16, 128)
    err, ref_err = np.max(np.abs(got - oracle)), np.max(np.abs(same_precision - oracle))
    assert err <= 2 * ref_err, (err, ref_err)  # the field's rule: at most 2x the reference's own error
    # the one-token sequence attends to its first key alone: its output is that key's v row, per head
    first_page = int(args[4][2, 0])
    np.testing.assert_allclose(got[2].reshape(2, 8, 128)[:, 0], oracle[2].reshape(2, 8, 128)[:, 0], atol=2e-2)
    np.testing.assert_allclose(
        oracle[2].reshape(2, 8, 128)[:, 0], np.asarray(args[2][first_page, 0], np.float32), atol=1e-6
    )
    # a kernel that ignored the mask (every page counted) is far off on the short sequences
    wrong = source.replace("keep = mask_ref[...] != 0", "keep = mask_ref[...] != 2")
    assert wrong != source
    (tmp_path / "wrong.py").write_text(wrong)
    bad = np.asarray(load(tmp_path / "wrong.py", "paged_wrong").workload(*args).astype(jnp.float32))
    assert np.max(np.abs(bad - oracle)) > 10 * err


DECODE = """
import jax
import jax.numpy as jnp

SIZES = {
    "full": {"b": 64, "s": 4096, "hq": 64, "hkv": 8, "t": T},
    "small": {"b": 3, "s": 320, "hq": 16, "hkv": 2, "t": T},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    ks = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(ks[0], (s["b"], s["t"], s["hq"], 128), jnp.float32).astype(jnp.bfloat16)
    k = jax.random.normal(ks[1], (s["b"], s["s"], s["hkv"], 128), jnp.float32).astype(jnp.bfloat16)
    v = jax.random.normal(ks[2], (s["b"], s["s"], s["hkv"], 128), jnp.float32).astype(jnp.bfloat16)
    return q, k, v, jax.random.randint(ks[3], (s["b"],), 1, s["s"] + 1, jnp.int32)


def workload(q, k, v, lens):
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, t, hkv, hq // hkv, d)
    s = jnp.einsum("bthgd,bshd->bhgts", qg, k, preferred_element_type=jnp.float32) * d**-0.5
    valid = jnp.arange(k.shape[1])[None, :] < lens[:, None]
    s = jnp.where(valid[:, None, None, None, :], s, -1e30)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)  # rounded before p.v, as Flax and vLLM's references do
    return jnp.einsum("bhgts,bshd->bthgd", p, v).reshape(b, t, hq, d)
"""


@pytest.mark.parametrize(
    ("tokens", "template"), [(1, "cache_attention"), (4, "cache_attention"), (64, "flash_program")]
)
def test_a_decode_step_over_a_contiguous_cache_reads_its_rows_as_they_lie(tokens, template, tmp_path):
    # one query token (or a few speculative ones) a sequence against a [N, S, H, D] cache and its lengths:
    # the cache's rows are read where they lie; 64 tokens a sequence (1024 query rows) is prefill: flash
    ref = tmp_path / "decode_ref.py"
    ref.write_text(DECODE.replace("T}", f"{tokens}}}"))
    source = first_kernel(program_of(ref), get_chip("tpu-v6e"))
    assert f"template={template}" in source
    if template == "cache_attention":
        assert "k_cache.reshape(n_seq, s_kv * n_heads, d)" in source and "make_async_copy" not in source


@pytest.mark.slow  # interpret mode: 3 sequences x 2 token blocks (the second partial)
def test_the_cache_kernel_matches_the_reference_on_lengths_and_a_partial_block(tmp_path):
    ref = tmp_path / "decode_ref.py"
    ref.write_text(DECODE.replace("T}", "1}"))
    program = program_of(ref)
    t = build(program, Symbolic(program))
    assert t.name == "cache_attention"
    source = t.render({"block_tokens": 256}, "program").replace("interpret=False", "interpret=True")
    (tmp_path / "cache_kernel.py").write_text(source)
    kernel, module = load(tmp_path / "cache_kernel.py", "cache_kernel"), load(ref, "decode_ref")
    q, k, v, _ = module.create_inputs(size="small")
    args = (q, k, v, jnp.asarray([320, 200, 1], jnp.int32))  # whole, ending in the first block, one token
    got = np.asarray(kernel.workload(*args).astype(jnp.float32))
    up = tuple(a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a for a in args)
    oracle = np.asarray(module.workload(*up).astype(jnp.float32))
    err = np.max(np.abs(got - oracle))
    assert err <= 2 * np.max(np.abs(np.asarray(module.workload(*args).astype(jnp.float32)) - oracle))
    np.testing.assert_allclose(
        oracle[2, 0].reshape(2, 8, 128)[:, 0], np.asarray(v[2, 0], np.float32), atol=1e-6
    )
