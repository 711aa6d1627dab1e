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


OPTIMIZE_MODEL = """Optimize the model step {model!r} on {target} with Pallas kernels, region by region, and
report the end-to-end estimate. Work through these steps with the maxkernel tools, in order; every time
below is a static estimate (nothing runs on a chip here): say so whenever you quote one.

1. Find the hot regions: call `find_hotspots` with model={model!r}, target={target!r}{size_arg}. Read the
   table: each region's id, count, share of the step, bound and headroom. Pick the top {top} regions by
   share (skip any costed at 0 us: XLA fused it into a neighbour). Say which you picked and why.
2. Extract each picked region: call `extract_region` with model={model!r} and its region id. Each call
   writes a standalone reference file (plain JAX, SIZES full and small, inputs drawn like the model's),
   checked by splicing it back into the model bit for bit. Use that file as the reference from here on.
3. For each extracted region, run the Auto loop by hand: the `plan_kernel` prompt (task = the extracted
   file), then `implement_kernel`; `compile_kernel` for {target}; `validate_kernel` against the extracted
   reference (fresh seeds, its check sizes); on a failure, the `debug_kernel` prompt with the verdict and
   try again (at most 3 times). When it validates, `estimate_kernel` at the target size and compare it
   with the region's time from step 1. A region with no valid kernel stays as the model has it: say so.
4. Compose: call `compose_kernels` with model={model!r}, kernels = {{region id: kernel file}} for every
   region with a valid kernel, target={target!r}{size_arg}. It validates the whole step with the
   kernels in place against the model. If it does not match, drop kernels one at a time (largest region
   first kept) until it does, and say which were dropped and why.
5. Report: per region, its share, before (hotspot estimate x count), after (the kernel's estimate x
   count) and its kernel's verdict; and the whole step before -> after with the arithmetic from
   compose's estimate (step - sum(before) + sum(after)) and its tier. The same chain runs unattended as
   `maxkernel-orchestrate model {model} --top {top} --target {target}`.
"""


def optimize_model(
    model: str,
    target: str = DEFAULT_TARGET,
    top: str = "3",
    size: str = "",
    ctx: Context[AppState] | None = None,
) -> list[Message]:
    """Walk through a model step: find_hotspots -> extract_region -> the Auto loop (plan, implement, validate,
    estimate) per region -> compose_kernels, and report the end-to-end estimate."""
    _chip(target)  # a TPU target: the hotspots and every estimate are for one
    try:
        k = int(top)
    except ValueError:
        raise _bad_argument(f"top: a number of regions, got {top!r}") from None
    if k < 1:
        raise _bad_argument(f"top: at least 1 region, got {k}")
    if ctx is not None:
        from maxkernel.server.requests import resolve_reference, state_of

        try:
            resolve_reference(state_of(ctx).workspace, model)
        except ToolError as e:
            raise _bad_argument(f"model: {e}") from None
    text = OPTIMIZE_MODEL.format(
        model=model, target=target, top=k,
        size_arg=f", size={size!r}" if size else ""
    )  # fmt: skip
    return [UserMessage(text)]


def port_to_jax(source: str, ctx: Context[AppState] | None = None) -> list[Message]:
    """Port a PyTorch/Triton source (a workspace file) to a JAX reference by hand, then check it against the
    source with the port_source tool (the same check `maxkernel port --check` runs)."""
    from maxkernel.subagents.port import render_port_prompt

    path = Path(source)
    if ctx is not None:
        from maxkernel.server.requests import state_of
        from maxkernel.server.workspace import WorkspaceError

        try:
            path = state_of(ctx).workspace.resolve(source, kind="source")
        except WorkspaceError as e:
            raise _bad_argument(f"source: {e}") from None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _bad_argument(f"source: cannot read {source}: {e}") from None
    return [UserMessage(render_port_prompt(text, source))]


def register(server: MCPServer) -> None:
    for fn, title in [
        (plan_kernel, "Plan a TPU kernel"),
        (implement_kernel, "Implement a kernel plan"),
        (debug_kernel, "Debug a failing kernel"),
        (analyze_profile, "Analyze a kernel profile"),
        (optimize_model, "Optimize a model step region by region"),
        (port_to_jax, "Port a PyTorch/Triton source to JAX"),
    ]:
        server.prompt(title=title)(fn)
