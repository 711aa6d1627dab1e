"""The packaged Pallas-on-TPU guide."""

import pytest

from maxkernel.subagents import guide_sections, load_guide, relevant_guide
from maxkernel.tpu_tools.hardware.chips import CHIPS

MiB = 1 << 20


def test_guide_loads_and_has_substance():
    text = load_guide()
    assert 250 <= len(text.splitlines()) <= 450


@pytest.mark.parametrize("chip", CHIPS.values(), ids=list(CHIPS))
def test_guide_states_each_chips_vmem_and_mxu(chip):
    text = load_guide()
    vmem = f"{chip.vmem_bytes // MiB} MiB"
    row = next(line for line in text.splitlines() if line.startswith(f"| {chip.name} |"))
    assert vmem in row
    assert f"{chip.mxu_shape[0]}×{chip.mxu_shape[1]}" in row
    assert f"{chip.hbm_gbps:g}" in row


@pytest.mark.parametrize(
    "needle",
    [
        "last two dimensions of your block shape are divisible by 8 and 128",
        "RESOURCE_EXHAUSTED",
        "space=vmem",
        "Unimplemented primitive in Pallas TPU lowering",
        "failed to legalize operation",
        "Unsupported TPU device kind",
        "vmem_limit_bytes",
        "PrefetchScalarGridSpec",
        "make_async_copy",
        "SemaphoreType.DMA",
        "pl.CostEstimate",
        "dimension_semantics",
        "(16, 128)",
        "(32, 128)",
        "pl.when",
    ],
)
def test_guide_covers(needle):
    assert needle in load_guide()


def test_sections_split_on_headings():
    sections = guide_sections()
    assert "Common errors and fixes" in sections
    assert all(body.startswith("## " + title) for title, body in sections.items())


def test_relevant_guide_picks_sections_by_error():
    text = relevant_guide("Mosaic failed: Bad lhs/rhs type: 'vector<8x128xi32>'")
    assert "## Dtypes" in text and "## Common errors and fixes" in text
    assert "## Scalar prefetch" not in text
    assert relevant_guide("something nobody anticipated") == load_guide()


def test_keyword_map_names_real_sections():
    from maxkernel.subagents.guide import _SECTION_KEYWORDS

    assert set(_SECTION_KEYWORDS) <= set(guide_sections())


def test_block_shape_error_brings_the_divisibility_section():
    text = relevant_guide(
        "ValueError: ... last two dimensions of your block shape are divisible by 8 and 128 ..."
    )
    assert "## Block shapes: the divisibility rule" in text
