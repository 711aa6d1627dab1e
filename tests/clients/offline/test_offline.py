"""The offline model: template kernels that compile and validate, an estimate-guided walk, parseable replies."""

from __future__ import annotations

import asyncio
import json

import pytest

from maxkernel.clients.models.base import Message
from maxkernel.clients.models.registry import get_model
from maxkernel.clients.offline.model import OfflineModel
from maxkernel.clients.offline.templates import parse_config_text, template_for
from maxkernel.subagents.parse import parse_output
from maxkernel.subagents.render import (
    render_analyze_profile_prompt,
    render_autotune_prompt,
    render_debug_prompt,
    render_implement_prompt,
    render_plan_prompt,
    render_test_prompt,
)
from maxkernel.subagents.roles import get_role
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

CHIP = get_chip("tpu-v6e")


def spec(task: str) -> str:
    return f"JaxBench task {task}; size: small; target tpu-v6e."


def ask(model: OfflineModel, role: str, prompt: str):
    messages = [Message.system(get_role(role).system_prompt), Message.user(prompt)]
    return asyncio.run(model.request(messages))


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=240)


def estimate(evaluator: Evaluator, path: str, task: str) -> float:
    out = evaluator.estimate(path, task, "tpu-v6e", "small", timeout_s=240)
    assert out.ok and out.estimate is not None, out.failure
    return out.estimate.estimated_time_us


def plan_and_implement(
    model: OfflineModel, task: str, kernel: str | None = None, feedback: str | None = None
):
    plan_reply = ask(model, "planner", render_plan_prompt(spec(task), CHIP, kernel=kernel, feedback=feedback))
    plan = parse_output("planner", plan_reply.text)
    impl = ask(model, "implementer", render_implement_prompt(plan, spec(task), CHIP))
    return plan, parse_output("implementer", impl.text).source


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.parametrize("task", ["12p_RMSNorm", "8p_GEMM"])
def test_first_kernel_compiles_validates_and_estimates_guide_the_next(task, evaluator, tmp_path):
    model = OfflineModel()
    plan, source = plan_and_implement(model, task)
    first = tmp_path / "first.py"
    first.write_text(source)
    config = parse_config_text(source)[1]
    assert {k: config[k] for k in plan.block_sizes} == plan.block_sizes

    compiled = evaluator.compile(str(first), task, "tpu-v6e", "small")
    assert compiled.ok, compiled.failure
    validated = evaluator.validate(str(first), task, "cpu", "small", seeds=1)
    assert validated.ok, validated.failure

    est1 = estimate(evaluator, str(first), task)
    feedback = json.dumps({"kind": "estimate", "estimated_time_us": est1, "validate_ok": True})
    _, source2 = plan_and_implement(model, task, kernel=source, feedback=feedback)
    assert parse_config_text(source2) != parse_config_text(source)  # never the same config twice
    second = tmp_path / "second.py"
    second.write_text(source2)
    assert estimate(evaluator, str(second), task) < est1


def test_every_role_reply_parses_and_the_debugger_halves_on_vmem():
    model = OfflineModel()
    kernel = template_for("8p").render(
        {
            "block_m": 256,
            "block_n": 2048,
            "block_k": 512,
            "grid_order": "mnk",
            "acc_dtype": "float32",
            "buffers": 2,
        },
        "dense_matmul",
    )
    error = "vmem_exhausted: Ran out of memory in memory space vmem while allocating the scoped buffers"
    reply = ask(model, "debugger", render_debug_prompt(kernel, error, chip=CHIP, task_spec=spec("8p_GEMM")))
    diag = parse_output("debugger", reply.text)
    assert diag.error_class == "vmem_oom"
    fixed = parse_config_text(diag.fixed_source)[1]
    assert fixed["block_n"] == 1024 and fixed["block_m"] == 256

    # The same failure again, with that fix listed as failed: a different fix.
    again = ask(
        model,
        "debugger",
        render_debug_prompt(
            diag.fixed_source, error, failed_fixes=[diag], chip=CHIP, task_spec=spec("8p_GEMM")
        ),
    )
    fixed2 = parse_config_text(parse_output("debugger", again.text).fixed_source)[1]
    assert fixed2 not in (fixed, parse_config_text(kernel)[1])

    tests = parse_output("tester", ask(model, "tester", render_test_prompt(spec("8p_GEMM"), CHIP)).text)
    assert len(tests.cases) >= 2
    report = {"static_estimate": {"estimated_time_us": 12.5, "bound": "overhead"}}
    analysis = parse_output(
        "profile_analyst",
        ask(model, "profile_analyst", render_analyze_profile_prompt(report, None, CHIP)).text,
    )
    assert analysis.bottleneck == "overhead"
    space = parse_output(
        "autotuner", ask(model, "autotuner", render_autotune_prompt(kernel, spec("8p_GEMM"), CHIP)).text
    )
    assert 896 % min(space.tunables["block_n"]) == 0 and 256 not in space.tunables["block_n"]


def test_unknown_operator_says_to_use_an_llm():
    model = get_model("offline")
    reply = ask(model, "planner", render_plan_prompt(spec("10p_Sparse_MoE"), CHIP))
    assert reply.finish_reason == "unsupported" and reply.cost_usd == 0.0
    assert "offline model has no template for operator" in reply.text and "--model gemini" in reply.text
    assert reply.usage.input_tokens > 0


def test_the_task_is_the_one_the_prompt_is_about_not_an_example_it_quotes():
    # 7p's prompt quotes 1p's flash kernel among its retrieved examples: the model once wrote 1p's flash
    # kernel for 7p (a 3-argument workload for a 6-input reference) because the registry lists 1p first.
    from maxkernel.clients.offline.model import _task_of

    prompt = (
        '## Task\n{\n  "id": "7p_Ragged_Paged_Attention",\n  "operator": "ragged_paged_attention"\n}\n'
        "### 3. _flash_kernel (jaxbench/tasks/1p_Flash_Attention/pallas_reference.py)\n"
    )
    assert _task_of(prompt) == ("7p_Ragged_Paged_Attention", "ragged_paged_attention")
    # no id field: the task named first in the text, whatever the registry's order
    assert _task_of("tune 12p_RMSNorm; see also 1p_Flash_Attention")[0] == "12p_RMSNorm"
