"""Models as users write them with Flax linen and Equinox (both installed with the dev extras).

Nothing in maxkernel imports either library: these check that the traced step of a real Flax or
Equinox model is split, costed, named after the user's modules and lines, and extracted like any other.
"""

from __future__ import annotations

import pytest
from conftest_paths import REFS

from maxkernel.tpu_tools.model.extract import extract_region
from maxkernel.tpu_tools.model.hotspots import find_hotspots

FLAX = str(REFS / "flax_block_model.py")
EQX = str(REFS / "equinox_mlp_model.py")


def _own_lines(report, path: str) -> list[str]:
    return [o for c in report.regions for o in c.region.origin if ".py:" in o and not o.startswith(path)]


def test_flax_module_paths_are_the_regions_and_lines_are_the_users():
    r = find_hotspots(FLAX, "tpu-v5e", "small")
    by_id = {c.region.id: c.region for c in r.regions}
    assert by_id["Block.attn"].kind == "attention" and by_id["Block.attn"].boundary == "scope"
    assert {"Block.attn.qkv", "Block.attn.out", "Block.mlp.up", "Block.mlp.down"} <= set(by_id)
    assert by_id["Block.norm{1,2}"].count == 2 and {"Block/norm1", "Block/norm2"} <= set(
        by_id["Block.norm{1,2}"].origin
    )
    assert not _own_lines(r, FLAX), "a region names a line inside flax, not the model's own"
    assert r.regions_us + r.program_overhead_us == pytest.approx(r.step_us, rel=0.1), r.sum_note


def test_equinox_layers_without_scopes_are_grouped_by_pattern_and_merged_across_layers():
    r = find_hotspots(EQX, "tpu-v6e", "small")
    assert all(c.region.boundary == "pattern" for c in r.regions)
    gate = [c.region for c in r.regions if c.region.ops.get("logistic")]  # silu(gate(x)): one per layer
    assert len(gate) == 1 and gate[0].count == 2 and gate[0].kind == "matmul_epilogue"
    assert sum(c.region.ops.get("dot_general", 0) * c.region.count for c in r.regions) == 6  # 3 per layer
    assert not _own_lines(r, EQX)
    assert not [c for c in r.regions if "random_seed" in c.region.ops]


@pytest.mark.slow  # each splice runs the whole model op by op at two sizes: tens of seconds
@pytest.mark.parametrize("model,region", [(FLAX, "Block.attn"), (EQX, None)])
def test_a_library_models_region_extracts_and_splices_back_bit_identically(model, region):
    if region is None:  # Equinox: the merged gate matmul of both layers
        r = find_hotspots(model, "tpu-v6e", "small")
        region = next(c.region.id for c in r.regions if c.region.ops.get("logistic"))
    report, text = extract_region(model, region)
    assert "bit-identical" in report.checks[0], report.checks
    assert "import flax" not in text and "import equinox" not in text  # plain JAX: runs without the library


# Gemma 2 (`gemma` 2.0.8) and Griffin (`recurrentgemma` 1.0.1), unmodified, tiny configs (tests/refs/*_model.py).
# Installed by `make test-slow` (the Makefile's models stamp: without their dependencies, jax pin kept).
GEMMA2 = str(REFS / "gemma2_model.py")
GRIFFIN = str(REFS / "griffin_model.py")


def _needs(lib: str) -> None:
    pytest.importorskip(lib, reason=f"{lib} is installed by make test-slow (the Makefile's models stamp)")


@pytest.mark.slow  # two library models traced at two sizes and compiled for the target: ~30 s under load
@pytest.mark.parametrize("model,lib", [(GEMMA2, "gemma"), (GRIFFIN, "recurrentgemma")])
def test_library_models_regions_are_the_same_at_both_sizes_named_by_layers_and_the_librarys_lines(model, lib):
    _needs(lib)
    from maxkernel.tpu_tools.model.extract import _trace
    from maxkernel.tpu_tools.problem.reference import load_reference

    ref = load_reference(model)
    ids = {size: [r.id for r in _trace(ref, size)[2]] for size in ("small", "full")}
    assert ids["small"] == ids["full"]
    r = find_hotspots(model, "tpu-v5e", "small")
    regions = {c.region.id: c.region for c in r.regions}
    assert all(c.region.extractable and c.region.composable for c in r.regions)
    assert "every region is extractable (plain JAX) and composable" in r.notes
    assert not [i for i in regions if "~" in i]
    lines = [o for c in r.regions for o in c.region.origin if ".py:" in o]
    assert lines and all(f"/{lib}/" in o for o in lines), lines  # the library's own lines, never flax's
    assert r.regions_us + r.program_overhead_us == pytest.approx(r.step_us, rel=0.1), r.sum_note
    if lib == "gemma":  # local (a lax.cond builds the window) and global attention, named by their layers
        # and by the word for what tells them apart: the library function only the local one calls
        local = regions["Transformer.layer_{0,2}.attn.sliding_mask"]
        glob = regions["Transformer.layer_{1,3}.attn.no_sliding_mask"]
        assert local.kind == glob.kind == "attention" and "cond" in local.ops and "cond" not in glob.ops
        assert r.region("Transformer.layer_{0,2}.attn") is r.region(local.id)  # the id without its word
    else:  # the RG-LRU's scan over time is one recurrence region, its Conv1D one region
        (rglru,) = [g for g in regions.values() if g.kind == "recurrence"]
        assert rglru.id == "Griffin.blocks.{0,1}.recurrent_block.rg_lru.recurrence" and rglru.ops["scan"] == 1
        assert [i for i in regions if "conv_1d" in i] == ["Griffin.blocks.{0,1}.recurrent_block.conv_1d"]


@pytest.mark.slow  # every region over 5% of the step extracted and checked at small and derived: minutes
@pytest.mark.parametrize("model,lib", [(GEMMA2, "gemma"), (GRIFFIN, "recurrentgemma")])
def test_every_region_over_5pct_of_a_library_model_extracts_bit_identically(model, lib):
    _needs(lib)
    r = find_hotspots(model, "tpu-v5e", "full")
    big = [c.region.id for c in r.regions if c.share > 0.05]
    assert big
    for rid in big:
        report, text = extract_region(model, rid)
        assert all("bit-identical" in c for c in report.checks[:2]), (rid, report.checks)
        assert f"import {lib}" not in text and "from gemma" not in text  # plain JAX: runs without the library
    kinds = {c.region.kind for c in r.regions if c.region.id in big}
    assert ("recurrence" if lib == "recurrentgemma" else "attention") in kinds, kinds


@pytest.mark.slow  # compose validates the whole step in interpret mode and compiles it for the target
def test_a_library_models_region_composed_with_its_own_code_reads_one(tmp_path):
    _needs("gemma")
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.model.compose import compose
    from maxkernel.tpu_tools.model.extract import write_new

    rid = "Transformer.layer_{0,2}.attn"  # the local attention: its lax.cond written as lax.switch
    _, text = extract_region(GEMMA2, rid)
    own = write_new(tmp_path / "own.py", text)
    c = compose(
        Evaluator(timeout_s=600), GEMMA2, {rid: str(own)}, str(tmp_path / "c"), target="tpu-v5e", size="small"
    )
    assert c.ok, c.verdict
    est = c.estimate
    assert est is not None and est.speedup == pytest.approx(1.0, abs=1e-9), est.arithmetic
    assert est.composed_speedup == pytest.approx(1.0, abs=0.02), est.composed_note


@pytest.mark.slow  # extracts a region of Gemma 2 (the model runs at small and derived): ~15-50 s
def test_an_extracted_regions_masks_and_positions_keep_the_models_form(tmp_path):
    _needs("gemma")
    import numpy as np

    from maxkernel.tpu_tools.model.extract import write_new
    from maxkernel.tpu_tools.problem.reference import load_reference

    _, text = extract_region(GEMMA2, "Transformer.layer_{0,2}.attn")
    ref = load_reference(str(write_new(tmp_path / "attn.py", text)))
    for size in ("small", "derived"):
        a, b = ref.create_inputs(size, 0), ref.create_inputs(size, 1)
        (mask,) = [np.asarray(x) for x in a if x.dtype == bool]
        (pos,) = [np.asarray(x) for x in a if "int" in str(x.dtype)]
        s = mask.shape[-1]
        assert (mask == np.tril(np.ones((s, s), bool))).all()  # causal, not bernoulli bools
        assert (pos == np.arange(s)).all()  # positions 0..L-1, not random ints
        floats = [
            (np.asarray(x), np.asarray(y)) for x, y in zip(a, b, strict=True) if "float" in str(x.dtype)
        ]
        assert floats and all(not np.array_equal(x, y) for x, y in floats)  # the floats vary by seed


@pytest.mark.slow  # the whole Griffin step in interpret mode with a Pallas scan in it: ~4 min on 2 cores
def test_griffin_composed_with_recurrentgemmas_own_pallas_rglru_matches_and_is_faster(tmp_path):
    """What a Griffin user would run first: the library's Pallas RG-LRU scan in the RG-LRU region. Measured
    (tpu-v5e, full = 2 x 256 tokens, estimate): the region 286.3 us x2 -> 28.9 us x2, the step 982.5 ->
    467.8 us (2.1x); one program 772 us (1.27x): both layers' scans are one compiled kernel (9.7 us a call,
    llo), and the ops beside the kernels were then costed from the HLO alone (752 us, where the hotspot
    table's schedule gives the same ops 410 us). They are now costed from their own programs, as the
    hotspot table's are, and the composed step is llo only when every one of them is."""
    _needs("recurrentgemma")
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.model.compose import compose

    rid = "Griffin.blocks.{0,1}.recurrent_block.rg_lru.recurrence"
    kernel = str(REFS / "griffin_rglru_pallas_kernel.py")
    c = compose(Evaluator(timeout_s=1500), GRIFFIN, {rid: kernel}, str(tmp_path / "c"), target="tpu-v5e",
                seeds=1)  # fmt: skip
    assert c.ok, c.verdict
    est = c.estimate
    assert est is not None and est.speedup > 1.5, est.arithmetic
    (row,) = est.regions
    assert row.after_us is not None and row.after_us < row.before_us and row.after_tier
    assert est.composed_speedup is not None and est.composed_speedup > 1.2, est.composed_note
    assert "(tier llo)" in est.composed_note, est.composed_note  # the shared kernel program paired
