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
    assert by_id["Block.norm"].count == 2 and {"Block/norm1", "Block/norm2"} <= set(
        by_id["Block.norm"].origin
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
