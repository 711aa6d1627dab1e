"""The prompts' examples section: at most three, within the stated budget, each naming its source."""

from __future__ import annotations

from maxkernel.subagents import (
    EXAMPLES_BUDGET_TOKENS,
    render_debug_prompt,
    render_examples_section,
    render_implement_prompt,
    render_plan_prompt,
    retrieval_budget,
)
from maxkernel.subagents.examples import tokens

CHIP = {
    "name": "tpu-v6e",
    "vmem_bytes": 128 << 20,
    "hbm_gbps": 1640,
    "peak_bf16_tflops": 918,
    "mxu_shape": 256,
}


def hit(i: int, chars: int = 20_000, kind: str = "kernel", name: str | None = None) -> dict:
    return {
        "id": f"jax.k{i}",
        "uri": f"maxkernel://examples/jax.k{i}",
        "kind": kind,
        "source": "jax",
        "version": "0.10.2",
        "path": f"/site-packages/jax/k{i}.py",
        "name": name or f"kernel_{i}",
        "excerpt": "```python\n" + "\n".join(f"x{i} = {n}  # line" for n in range(chars // 16)) + "\n```",
    }


def _section(prompt: str) -> str:
    start = prompt.index("## Working examples")
    rest = prompt[start + 3 :]
    end = rest.find("\n## ")
    return prompt[start : start + 3 + end] if end >= 0 else prompt[start:]


def test_each_prompt_keeps_its_examples_within_budget_and_names_sources():
    many = [hit(i) for i in range(5)]  # five huge excerpts: more than any budget
    prompts = {
        "planner": render_plan_prompt("task", CHIP, examples=many),
        "implementer": render_implement_prompt({"strategy": "tile"}, "task", CHIP, examples=many),
        "debugger": render_debug_prompt("k = 1", "VMEM exhausted", chip=CHIP, examples=many),
    }
    for role, prompt in prompts.items():
        section = _section(prompt)
        assert tokens(section) <= EXAMPLES_BUDGET_TOKENS[role], role
        assert f"budget {EXAMPLES_BUDGET_TOKENS[role]} tokens" in section
        assert section.count("\n### ") == 3 and "jax.k3" not in section  # best three only
        assert "(jax 0.10.2; /site-packages/jax/k0.py; full text: maxkernel://examples/jax.k0)" in section
        assert section.count("```") % 2 == 0  # a cut excerpt still closes its fence


def test_no_examples_no_section_and_retrieval_leaves_room():
    assert "Working examples" not in render_plan_prompt("task", CHIP)
    assert render_examples_section([], 2000) == ""
    for role, budget in EXAMPLES_BUDGET_TOKENS.items():
        assert retrieval_budget(role) < budget
    small = [hit(0, chars=400)]
    assert "x0 = 1" in render_examples_section(small, 2000)


def test_debugger_does_not_repeat_a_guide_section_it_already_carries():
    guide_hit = hit(9, 400, kind="guide", name="VMEM budgets")
    prompt = render_debug_prompt(
        "k = 1", "RESOURCE_EXHAUSTED ... space=vmem", chip=CHIP, examples=[guide_hit, hit(1, 400)]
    )
    assert "### 1. kernel_1" in prompt and "jax.k9" not in prompt
