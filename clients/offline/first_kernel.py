"""The offline model's first kernel for a reference: what the Auto loop's first iteration writes.

The planner picks the template's first config from the traced program in the task text and the
implementer renders it, through the same prompts and reply parsers a real run uses. Tests and
benchmarks/offline_coverage.py use it to judge the offline model without running the whole loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from maxkernel.clients.models.base import Message
from maxkernel.clients.offline.model import OfflineModel
from maxkernel.clients.offline.program_text import lists_equations, program_section, smaller_size
from maxkernel.subagents.parse import parse_output
from maxkernel.subagents.render import render_implement_prompt, render_plan_prompt
from maxkernel.subagents.roles import get_role


class NoKernel(RuntimeError):
    """The offline model wrote no kernel; the message is its own reason (no template fits, ...)."""


def _ask(model: OfflineModel, role: str, prompt: str) -> tuple[str, str]:
    messages = [Message.system(get_role(role).system_prompt), Message.user(prompt)]
    reply = asyncio.run(model.request(messages))
    return reply.text, reply.finish_reason or "stop"


def first_kernel(program: dict[str, Any], chip: Any, preamble: str = "Reference module.") -> str:
    """The implementer's source for the planner's first config on `program` (a describe_reference dict)."""
    # too large to list (7p at full): the same reference at a smaller size, as the Auto loop's task text does
    smaller = None if lists_equations(program) else smaller_size(program)
    if smaller is not None:
        from maxkernel.tpu_tools.problem.program import describe

        try:  # `reference` is a JaxBench id or a file's path; a file's CONFIG name does not resolve
            other = describe(str(program["reference"]), smaller).model_dump(mode="json")
        except Exception:  # noqa: BLE001 - no smaller trace to read: the census-only section, as before
            other = program
        program = other if lists_equations(other) else program
    spec = f"{preamble}\n\n{program_section(program)}"
    model = OfflineModel()
    text, finish = _ask(model, "planner", render_plan_prompt(spec, chip))
    if finish != "stop":
        raise NoKernel(text.strip().splitlines()[0] if text.strip() else finish)
    plan = parse_output("planner", text)
    text, finish = _ask(model, "implementer", render_implement_prompt(plan, spec, chip))
    if finish != "stop":
        raise NoKernel(text.strip().splitlines()[0] if text.strip() else finish)
    return parse_output("implementer", text).source
