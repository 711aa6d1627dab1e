"""A Pallas reference is the offline model's starting point: its own file first, then its own tuned parameters
(clients/offline/baseline.py). Fixtures are our own level-2-style files (tests/refs/level2/)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from maxkernel.clients.models.base import Message
from maxkernel.clients.offline.baseline import (
    baseline_template,
    recognised_tasks,
    reference_source,
    tunables_of,
)
from maxkernel.clients.offline.model import OfflineModel
from maxkernel.clients.offline.program_text import program_section
from maxkernel.clients.task_text import source_text
from maxkernel.subagents.parse import parse_output
from maxkernel.subagents.render import render_implement_prompt, render_plan_prompt
from maxkernel.subagents.roles import get_role
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe

LEVEL2 = Path(__file__).resolve().parents[2] / "refs" / "level2"
ROWSCALE = (LEVEL2 / "rowscale_config" / "baseline.py").read_text()

WORKLOAD_LITERALS = """
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def workload(x):
    num_kv_pages_per_block = 4
    quant_block = 64
    return run(x, block_size=128, scale=3, num_kv_pages_per_block=num_kv_pages_per_block)
"""


def test_tunables_are_the_files_own_tuned_parameters():
    assert [(t.name, t.value) for t in tunables_of(ROWSCALE)] == [("block_rows", 256)]
    found = {t.name: t.value for t in tunables_of(WORKLOAD_LITERALS)}
    # block-size names in the workload, by assignment or keyword; a quantization block is numerics, not tuning
    assert found == {"num_kv_pages_per_block": 4, "block_size": 128}


def test_the_initial_render_is_the_file_itself_with_a_marker():
    template = baseline_template(ROWSCALE)
    assert template is not None
    assert template.tunables["block_rows"] == (128, 256, 512)
    first = template.render(dict(template.initial), "program")
    marker, rest = first.split("\n", 1)
    assert marker == "# offline-config: template=baseline block_rows=256"
    assert rest == ROWSCALE
    moved = template.render({"block_rows": 512}, "program")
    assert 'TUNED_PARAMS = {"block_rows": 512}' in moved


def test_no_template_for_a_plain_jax_reference():
    plain = (LEVEL2 / "lengths_configs" / "baseline.py").read_text()
    assert baseline_template(plain) is None


def test_the_planner_proposes_the_baseline_first_and_says_so():
    spec = source_text(ROWSCALE)
    assert reference_source(spec) == ROWSCALE
    model = OfflineModel()
    messages = [
        Message.system(get_role("planner").system_prompt),
        Message.user(render_plan_prompt(spec, get_chip("tpu-v6e"))),
    ]
    reply = asyncio.run(model.request(messages))
    assert reply.finish_reason == "stop"
    plan = parse_output("planner", reply.text)
    assert "template=baseline block_rows=256" in plan.strategy
    assert "the baseline as brought" in reply.text


def _planner(model: OfflineModel, spec: str, feedback: str = "") -> str:
    prompt = render_plan_prompt(spec, get_chip("tpu-v6e"), feedback=feedback or None)
    reply = asyncio.run(
        model.request([Message.system(get_role("planner").system_prompt), Message.user(prompt)])
    )
    assert reply.finish_reason == "stop", reply.text
    return parse_output("planner", reply.text).strategy


def test_a_recognised_baseline_is_offered_our_template_once_then_the_faster_walk_goes_on():
    path = LEVEL2 / "gemm_config" / "baseline.py"
    program = describe(str(path), None).model_dump(mode="json")
    assert recognised_tasks(program) == ["8p_GEMM"]  # the same inputs and outputs at full as JaxBench 8p
    spec = source_text(path.read_text()) + "\n\n" + program_section(program)
    model = OfflineModel()
    first = _planner(model, spec)
    assert "template=baseline block_m=512 block_n=1024 block_k=1024" in first
    marker = "offline-config: " + first.split("offline-config: ", 1)[1].split("\n")[0]
    second = _planner(model, spec, f'## Feedback\n{marker}\nvalidation passed\n"estimated_time_us": 4600.0')
    assert "template=baseline" not in second and "offline-config: template=" in second  # ours, once
    ours = "offline-config: " + second.split("offline-config: ", 1)[1].split("\n")[0]
    # the implementer renders the plan's template, not the previous version's (the baseline's marker)
    plan = {"strategy": second, "block_sizes": {}}
    previous = baseline_template(path.read_text()).render(
        {"block_m": 512, "block_n": 1024, "block_k": 1024}, "program"
    )
    prompt = render_implement_prompt(plan, spec, get_chip("tpu-v6e"), previous_source=previous)
    reply = asyncio.run(
        model.request([Message.system(get_role("implementer").system_prompt), Message.user(prompt)])
    )
    assert "template=baseline" not in reply.text.split("```python", 1)[1].split("\n", 2)[1]
    # ours estimated slower than the baseline: the baseline's walk goes on (its own tuned parameters)
    third = _planner(model, spec, f'## Feedback\n{ours}\nvalidation passed\n"estimated_time_us": 5200.0')
    assert "template=baseline" in third
