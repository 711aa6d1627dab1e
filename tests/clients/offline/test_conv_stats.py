"""The conv_stats template (templates/conv_stats.py): a 2-D NCHW convolution summed over its rows and
columns in the same kernel.

A VALID, stride-1 conv, its bias and tanh-GELU, then a mean over (H, W) (39k's form at a test size, 8
input channels: 16 output rows per dot) gets conv_stats, not conv_split's conv-then-tail; its first kernel
compiles at the reference's full size with the real Mosaic compiler for v6e, and its smallest-block
render matches the reference in TPU interpret mode over several row blocks (the last one partial) and
several column chunks (the last one moved back over columns already summed). A kernel that sums the
rows past Ho, one that keeps only the last row block's sums, and one that sums the last chunk's overlap
twice fail the same check.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_files import compiled_text, interpret, module

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.conv_stats import pooled
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe

REF = '''"""conv (VALID, NCHW) + bias, tanh-GELU, mean over (H, W), all bf16: 39k's form at a test size."""
import jax
import jax.numpy as jnp

SIZES = {
    "full": {"n": 16, "c": 8, "o": 64, "h": 48, "w": 24},
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
    return jnp.mean(jax.nn.gelu(y + b.reshape(1, -1, 1, 1), approximate=True), axis=(2, 3))
'''

# 2 images x 64 channels x 8 group rows of f32 per output column: 8 columns per dot (10: 0-7, 2-9)
SMALL_CHUNKS = "CHUNK_BYTES = 4 * 2 * 64 * 8 * 8"
# v5e's VPU sum takes at most half the columns a dot (two chunks at least): 4 columns (0-3, 4-7, 6-9)
V5E_CHUNKS = "CHUNK_BYTES = 4 * 2 * 64 * 8 * 4"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv_stats")
    ref = root / "convpool_reference.py"
    ref.write_text(REF)
    program = describe(str(ref)).model_dump(mode="json")
    template, target, _ = program_template(program)
    ref_mod = module(root / "convpool_ref.py", REF)
    small = template.render({k: v[0] for k, v in template.tunables.items()}, "program")
    small = small.replace("CHUNK_BYTES = 4 << 20", SMALL_CHUNKS)
    inputs = ref_mod.create_inputs(size="small", key=3)
    want = np.asarray(ref_mod.workload(*[np.asarray(a, np.float32) for a in inputs]), np.float32)
    return root, program, template, target, ref_mod, small, inputs, want


@pytest.mark.slow  # the real Mosaic compile of the full-size kernel (~20 s on 2 busy cores)
def test_a_conv_then_a_spatial_mean_is_one_kernel_and_compiles_at_full_for_v6e(built):
    root, program, template, target, ref_mod, small, _, _ = built
    assert template.name == "conv_stats" and target == "full"
    assert SMALL_CHUNKS in small and "lax.fori_loop" in small
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert "template=conv_stats" in source and "interpret=False" in source and "pl.CostEstimate" in source
    assert "conv_general_dilated" not in source and "sh[0][2]" in source  # the mean's count from the shapes
    text = compiled_text(root / "first_v6e.py", source, ref_mod.create_inputs)
    assert "tpu_custom_call" in text and "bf16[16,64]" in text


def test_conv_stats_matches_the_reference_across_row_blocks_and_column_chunks(built):
    root, _, template, target, _, small, inputs, want = built
    assert template.name == "conv_stats" and target == "full"
    got = interpret(root, "small", small, inputs)
    # bf16 means up to ~1: an ulp or two of the output (the f32 oracle is not rounded)
    assert got.shape == want.shape and np.max(np.abs(got - want)) <= 1.6e-2


def test_fewer_rows_a_dot_match_the_reference_and_are_chosen_where_they_pad_less(built):
    """8 channels: 16 rows a dot fill 128 lanes but pad K to 432 and N to 1024; the cost model takes fewer
    (a group's input rows start mid-vreg, the last interleave block narrower than 128 lanes): same sums."""
    root, _, template, _, _, _, inputs, want = built
    assert template.tunables["rows_per_dot"] == (16, 8, 4)
    q = template.initial["rows_per_dot"]
    assert q < 16  # the cost model: less MXU padding at the same traffic
    first = {k: v[0] for k, v in template.tunables.items()}
    source = template.render(first | {"rows_per_dot": q}, "program").replace(
        "CHUNK_BYTES = 4 << 20", SMALL_CHUNKS
    )
    assert f"ROWS_PER_DOT = {q}" in source
    assert np.max(np.abs(interpret(root, f"rows_{q}", source, inputs) - want)) <= 1.6e-2


@pytest.mark.slow  # three interpret runs (~12 s on 2 cores)
def test_four_rows_a_dot_match_and_a_broken_one_fails(built):
    root, _, template, _, _, _, inputs, want = built
    first = {k: v[0] for k, v in template.tunables.items()}
    for q in (8, 4):
        source = template.render(first | {"rows_per_dot": q}, "program").replace(
            "CHUNK_BYTES = 4 << 20", SMALL_CHUNKS
        )
        if q == 4:
            assert np.max(np.abs(interpret(root, f"rows_{q}", source, inputs) - want)) <= 1.6e-2
        broken = source.replace("jnp.where(blk * th + i + lane_row < ho, part, 0.0)", "part")
        assert np.max(np.abs(interpret(root, f"rows_{q}_broken", broken, inputs) - want)) > 5e-2, q


@pytest.mark.parametrize(
    "good, bad",
    [
        ("jnp.where(blk * th + i + lane_row < ho, part, 0.0)", "part"),  # rows past Ho summed too
        ("jnp.where(blk == 0, 0.0, acc_ref[...]) + total", "total"),  # only the last row block's sums
        ("(start + pos // nb >= j * wc)", "(pos >= 0)"),  # the last chunk's overlap summed twice
    ],
)
def test_a_kernel_that_sums_the_wrong_positions_fails_the_check(built, good, bad):
    root, _, _, _, _, small, inputs, want = built
    broken = small.replace(good, bad)
    assert broken != small
    got = interpret(root, f"broken_{abs(hash(bad + good))}", broken, inputs)
    assert np.max(np.abs(got - want)) > 5e-2


def test_only_elementwise_ops_on_the_sums_follow_them(built):
    _, program, *_ = built
    at, after = pooled(program)
    assert program["equations"][at]["primitive"] == "reduce_sum" and after
    eqns = [dict(e) for e in program["equations"]]
    eqns.append({**eqns[-1], "primitive": "cumsum", "inputs": list(eqns[-1]["outputs"]), "outputs": ["zz"]})
    assert "cumsum" in pooled({**program, "equations": eqns, "outputs": ["zz"]})


def test_on_a_chip_without_bf16_vector_math_the_epilogue_runs_in_f32(built):
    """v5e's chip facts say its vector unit has no bf16 arithmetic (chips.py, from the compiler's schedule):
    the first kernel widens the bias once and runs GELU in f32 (39k at full, v5e, llo: 2857 -> 1933 us) on
    the conv's f32 result, unrounded (-> 1869 us), and sums it on the VPU where v6e sums a bf16 copy with a
    0/1 matrix on the MXU (packing f32 to bf16 for it costs v5e more than the adds: -> 1747 us; on v6e the
    VPU sum is the slower, 769 -> 904 us). v6e keeps bf16. Both match the reference."""
    root, program, _, _, _, _, inputs, want = built
    v5e, v6e = (first_kernel(program, get_chip(c)) for c in ("tpu-v5e", "tpu-v6e"))
    assert "jnp.asarray(0.5, jnp.float32)" in v5e and "c0_ref[...].astype(jnp.float32)" in v5e
    assert "jnp.asarray(0.5, jnp.bfloat16)" in v6e and "c0_ref[...].astype(jnp.float32)" not in v6e
    assert "acc.astype(jnp.float32)  # [cols * nb, q * O]: f32, not rounded to bfloat16" in v5e
    assert "acc.astype(jnp.bfloat16)  # [cols * nb, q * O]: rounded once" in v6e
    assert "jnp.dot(new.astype(jnp.bfloat16)" in v6e and "jnp.dot(new" not in v5e
    assert ".reshape(wc, nb, q * o).sum(axis=0)" in v5e
    got = interpret(root, "v5e_f32", v5e.replace("CHUNK_BYTES = 4 << 20", V5E_CHUNKS), inputs)
    assert np.max(np.abs(got - want)) <= 1.6e-2


@pytest.mark.slow  # three interpret-mode runs (~20 s on 2 cores): make test stays under 7 min
def test_v6es_mxu_sum_matches_and_v5es_vpu_sum_without_its_overlap_mask_fails(built):
    """The two sums of the chunk's columns: v6e's 0/1 matrix on the MXU matches the reference; v5e's VPU sum
    with its own mask removed, or with the last chunk summed unmasked like those before it, counts the last
    chunk's overlap (columns 6-7 of 10) twice and fails."""
    root, program, _, _, _, _, inputs, want = built
    v5e, v6e = (first_kernel(program, get_chip(c)) for c in ("tpu-v5e", "tpu-v6e"))
    got6 = interpret(root, "v6e_bf16", v6e.replace("CHUNK_BYTES = 4 << 20", SMALL_CHUNKS), inputs)
    assert np.max(np.abs(got6 - want)) <= 1.6e-2
    for name, old, new in [
        ("v5e_overlap", "jnp.where(cols, ", "jnp.where(True, "),
        # the chunks before the last are summed unmasked: the last one unmasked too overlaps
        ("v5e_last_unmasked", "part = columns(i, last, part)", "part = columns(i, last, part, masked=False)"),
    ]:
        broken = v5e.replace(old, new)
        assert broken != v5e
        bad = interpret(root, name, broken.replace("CHUNK_BYTES = 4 << 20", V5E_CHUNKS), inputs)
        assert np.max(np.abs(bad - want)) > 1.6e-2, name
