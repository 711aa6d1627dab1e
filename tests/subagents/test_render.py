"""Every role renders a complete prompt grounded in the chip numbers it was given."""

import re

import pytest

from maxkernel.subagents import (
    ROLES,
    Diagnosis,
    Plan,
    chip_facts,
    get_role,
    render_analyze_profile_prompt,
    render_autotune_prompt,
    render_debug_prompt,
    render_implement_prompt,
    render_plan_prompt,
    render_prompt,
    render_test_prompt,
)
from maxkernel.tpu_tools.hardware.chips import CHIPS, get_chip

TASK = "8p_GEMM: out = x @ y, x (M, K) bf16, y (K, N) bf16; SIZES full M=K=N=4096, small M=K=N=256."
KERNEL = "import jax\n\ndef workload(x, y):\n    return x @ y\n"
PLAN = Plan(
    strategy="tile m, n, k; f32 accumulator",
    block_sizes={"block_m": 512, "block_n": 512, "block_k": 1024},
    grid_order=["m", "n", "k"],
    dimension_semantics=["parallel", "parallel", "arbitrary"],
    expected_bound="compute",
    rationale="intensity 1365 flop/B > ridge",
)
# Made-up numbers, so a prompt can only contain them if it used the data it was given.
FAKE_CHIP = {
    "name": "tpu-test",
    "vmem_bytes": 12_345_678,
    "hbm_gbps": 4321.0,
    "peak_bf16_tflops": 765.0,
    "mxu_shape": (192, 192),
}


def _render_all(chip) -> dict[str, str]:
    return {
        "planner": render_plan_prompt(TASK, chip, kernel=KERNEL, feedback="too slow: 3.1 ms"),
        "implementer": render_implement_prompt(PLAN, TASK, chip),
        "debugger": render_debug_prompt(
            KERNEL, "ValueError: divisible by 8 and 128", ["use bm=100"], chip=chip
        ),
        "tester": render_test_prompt(TASK, chip, kernel=KERNEL),
        "profile_analyst": render_analyze_profile_prompt({"median_ms": 1.5}, {"ops": []}, chip),
        "autotuner": render_autotune_prompt(KERNEL, TASK, chip, plan=PLAN),
    }


def test_renderers_cover_every_role():
    assert set(_render_all(FAKE_CHIP)) == set(ROLES)


@pytest.mark.parametrize("role", sorted(ROLES))
def test_prompt_carries_the_given_chip_numbers(role):
    text = _render_all(FAKE_CHIP)[role]
    for number in ("12345678", "4321", "765", "192x192", "tpu-test"):
        assert number in text, (role, number)
    assert "## Reply format" in text


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_real_chip_specs_render(name):
    chip = get_chip(name)
    text = render_plan_prompt(TASK, chip)
    assert str(chip.vmem_bytes) in text
    assert f"{chip.hbm_gbps:g} GB/s" in text
    assert f"{chip.peak_bf16_tflops:g} TFLOP/s" in text
    assert f"{chip.mxu_shape[0]}x{chip.mxu_shape[1]}" in text


def test_chip_facts_ridge_point_and_text_passthrough():
    facts = chip_facts(get_chip("tpu-v6e"))
    assert "Ridge point: 561 flop/byte" in facts  # 920e12 / 1640e9
    assert chip_facts("  custom facts  ") == "custom facts"


def test_chip_facts_missing_numbers_is_one_clear_error():
    with pytest.raises(ValueError, match=r"missing \['hbm_gbps'"):
        chip_facts({"vmem_bytes": 1, "peak_bf16_tflops": 1, "mxu_shape": 128})


def test_no_placeholder_left_unfilled():
    for role, text in _render_all(FAKE_CHIP).items():
        template_vars = set(re.findall(r"\$(\w+)", get_role(role).template))
        for var in template_vars:
            assert f"${var}" not in text, (role, var)


def test_planner_and_implementer_embed_the_guide_nested():
    texts = _render_all(FAKE_CHIP)
    for role in ("planner", "implementer"):
        assert "divisible by 8 and 128" in texts[role]
        assert "### Common errors and fixes" in texts[role]  # guide headings demoted under the prompt's


def test_debug_prompt_carries_error_history_and_relevant_guide():
    fix = Diagnosis(cause="bk too big", error_class="vmem_oom", fix_summary="halve block_k", fixed_source="x")
    text = render_debug_prompt(
        KERNEL,
        "RESOURCE_EXHAUSTED: Allocation (size=1073741824) would exceed memory (size=134217728) space=vmem",
        [fix, "raise vmem_limit_bytes to 200 MiB"],
        chip=get_chip("tpu-v5e"),
    )
    assert "size=1073741824" in text
    assert "Do not repeat them" in text
    assert "1. halve block_k" in text and "2. raise vmem_limit_bytes" in text
    assert "### VMEM budgets" in text and "### Common errors and fixes" in text
    assert "### Online softmax" not in text  # only the sections the error points at


def test_debug_prompt_clips_huge_errors_keeping_both_ends():
    error = "HEAD-LINE\n" + "x" * 50_000 + "\nTAIL-LINE"
    text = render_debug_prompt(KERNEL, error, chip=FAKE_CHIP)
    assert "HEAD-LINE" in text and "TAIL-LINE" in text and "characters elided" in text
    assert len(text) < 40_000


def test_debug_prompt_requires_chip():
    with pytest.raises(ValueError, match="chip"):
        render_debug_prompt(KERNEL, "boom")


def test_render_prompt_by_role_name():
    text = render_prompt(
        "profile-analyst", report_json='{"median_ms": 2}', trace_summary=None, chip=FAKE_CHIP
    )
    assert '"median_ms": 2' in text and "Trace summary" not in text


def test_chip_facts_say_whether_the_vector_unit_does_bf16_math():
    """chips.py's bf16_vpu (read from the compiler's schedule: v5e 23824 bundles for a bf16 chain it runs
    in 9924 in f32; v6e 4867 against 9939) reaches the prompt, where an implementer (or the offline model)
    reads it."""
    from maxkernel.subagents.render import BF16_VPU_NO, BF16_VPU_YES, chip_facts
    from maxkernel.tpu_tools.hardware.chips import get_chip

    for name, native in (
        ("tpu-v4", False),
        ("tpu-v5e", False),
        ("tpu-v5p", False),
        ("tpu-v6e", True),
        ("tpu-7x", True),
    ):
        text = chip_facts(get_chip(name))
        assert (BF16_VPU_YES in text) == native and (BF16_VPU_NO in text) != native, name
