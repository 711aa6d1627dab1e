"""MCP prompts: the subagent roles' prompts, rendered with the task and the target chip's numbers.

A host shows these as slash commands; the text is the same the orchestrator's loops send, so a human
in the loop and the Auto loop ground the model the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from maxkernel.server.examples import prompt_examples
from maxkernel.server.requests import AppState
from maxkernel.server.tools import task_detail
from maxkernel.subagents import (
    get_role,
    render_analyze_profile_prompt,
    render_debug_prompt,
    render_implement_prompt,
    render_plan_prompt,
)
from maxkernel.tpu_tools.cli.args import DEFAULT_TARGET
from maxkernel.tpu_tools.hardware.chips import UnknownChipError, get_chip


def task_spec(task: str) -> str:
    """A task as prompt text: its summary, then the reference source it must match."""
    d = task_detail(task)
    return (
        f"JaxBench task {d.summary.id} ({d.summary.name}; model {d.summary.model}, operator "
        f"{d.summary.operator}).\n\nSummary:\n```json\n{d.summary.model_dump_json(indent=2)}\n```\n\n"
        f"Reference (`{d.reference_path}`; the kernel's `workload(*inputs)` must match its `workload`):\n"
        f"```python\n{d.reference_source.rstrip()}\n```\n"
    )


def _bad_argument(message: str) -> MCPError:
    """A prompt argument the server cannot use: the host shows this message, not 'Error rendering prompt'."""
    return MCPError(INVALID_PARAMS, message)


def reference_spec(reference: str, ctx: Context | None) -> str:
    """A JaxBench id or a reference module in the workspace, as prompt text (the text the kernel must match)."""
    from maxkernel.server.requests import resolve_reference, state_of

    try:
        if ctx is None:
            return task_spec(reference)
        resolved = resolve_reference(state_of(ctx).workspace, reference)
        if not Path(resolved).is_absolute():  # a canonical JaxBench id
            return task_spec(resolved)
    except ToolError as e:
        raise _bad_argument(str(e)) from None
    path = Path(resolved)
    files = sorted(path.glob("*.py")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise _bad_argument(f"reference {reference!r}: no Python module at {path}")
    try:
        body = "\n\n".join(f"# {f.name}\n{f.read_text(encoding='utf-8').rstrip()}" for f in files)
    except (OSError, UnicodeDecodeError) as e:
        raise _bad_argument(f"reference {reference!r} cannot be read: {e}") from None
    return (
        f"Reference module `{reference}` (the kernel's `workload(*inputs)` must match its `workload`; "
        f"inputs come from its `create_inputs`):\n```python\n{body}\n```\n"
    )


def _chip(target: str | None):
    try:
        return get_chip(target or DEFAULT_TARGET)
    except UnknownChipError as e:
        raise _bad_argument(f"target: {e} (prompts need a TPU generation)") from None


def _messages(role: str, text: str) -> list[Message]:
    return [UserMessage(f"{get_role(role).system_prompt}\n\n{text}")]


def plan_kernel(
    task: str,
    kernel: str = "",
    feedback: str = "",
    target: str = DEFAULT_TARGET,
    ctx: Context[AppState] | None = None,
) -> list[Message]:
    """Plan a Pallas kernel for a JaxBench task or a workspace reference module: tiling, grid, VMEM budget."""
    spec, examples = reference_spec(task, ctx), prompt_examples(ctx, "planner", task=task)
    return _messages(
        "planner", render_plan_prompt(spec, _chip(target), kernel or None, feedback or None, examples)
    )


def implement_kernel(
    plan: str, task: str, target: str = DEFAULT_TARGET, ctx: Context[AppState] | None = None
) -> list[Message]:
    """Write the Pallas module that carries out a plan."""
    spec, examples = reference_spec(task, ctx), prompt_examples(ctx, "implementer", task=task)
    return _messages("implementer", render_implement_prompt(plan, spec, _chip(target), examples=examples))


def debug_kernel(
    kernel: str,
    error: str,
    target: str = DEFAULT_TARGET,
    task: str = "",
    ctx: Context[AppState] | None = None,
) -> list[Message]:
    """Explain why a kernel fails (compiler error or verdict JSON) and return the fixed module."""
    spec = reference_spec(task, ctx) if task else None
    examples = prompt_examples(ctx, "debugger", error=error)
    return _messages(
        "debugger", render_debug_prompt(kernel, error, chip=_chip(target), task_spec=spec, examples=examples)
    )


def analyze_profile(
    report: str, trace_summary: str = "", target: str = DEFAULT_TARGET, kernel: str = ""
) -> list[Message]:
    """Name the bottleneck from a profile report (JSON) and a trace summary; propose the next move."""
    try:
        report_value = json.loads(report)
    except json.JSONDecodeError:
        report_value = report
    return _messages(
        "profile_analyst",
        render_analyze_profile_prompt(report_value, trace_summary or None, _chip(target), kernel or None),
    )


def register(server: MCPServer) -> None:
    for fn, title in [
        (plan_kernel, "Plan a TPU kernel"),
        (implement_kernel, "Implement a kernel plan"),
        (debug_kernel, "Debug a failing kernel"),
        (analyze_profile, "Analyze a kernel profile"),
    ]:
        server.prompt(title=title)(fn)
