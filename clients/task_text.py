"""The task text every role reads: the reference's summary and source, then its traced program.

The Auto loop and the graph search both build it here, from the same two server calls (`get_task` for a
JaxBench id, `describe_reference` for the traced program), so a model, the offline one above all, sees the
same task and writes the same first kernel from either. `LocalTaskSource` answers the same two calls
in-process, for the search's estimate-only dry runs that start no server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from maxkernel.clients.mcp_client import ServerToolError
from maxkernel.clients.offline.program_text import HEADING, lists_equations, program_section, smaller_size


class TaskSource(Protocol):
    async def get_task(self, task: str) -> dict: ...

    async def describe_reference(self, reference: str, size: str | None = None) -> dict: ...


def source_text(source: str) -> str:
    """The opening of the task text for a reference file (a JaxBench id gets its summary from get_task)."""
    return f"Reference module (the kernel must match it):\n```python\n{source}\n```" if source else ""


async def task_text(
    server: TaskSource,
    reference: str,
    size: str | None,
    base: str = "",
    *,
    note: Callable[[str], None] | None = None,
) -> str:
    """`base` (or, when empty, the task's summary and reference source from get_task), followed by the
    reference's traced program unless `base` has it already. A failed trace is noted, not fatal: models
    then see the source only."""
    text = base
    if not text:
        detail = await server.get_task(reference)
        summary = json.dumps(detail.get("summary", {}), indent=2)
        text = f"{summary}\n\nReference (the kernel must match it):\n```python\n{detail.get('reference_source', '')}\n```"
    if HEADING not in text:
        try:
            program = await server.describe_reference(reference, size)
            smaller = None if lists_equations(program) else smaller_size(program)
            if smaller is not None:  # too large to list at this size: the same reference at a smaller one
                other = await server.describe_reference(reference, smaller)
                if lists_equations(other):
                    program = other
            text += "\n\n" + program_section(program)
        except ServerToolError as e:
            if note is not None:
                note(f"describe_reference failed, models see the source only: {str(e)[:300]}")
    return text


class LocalTaskSource:
    """get_task and describe_reference answered in this process (the reference is imported and traced
    here, as the search's in-process estimate objective already does)."""

    async def get_task(self, task: str) -> dict[str, Any]:
        from maxkernel.jaxbench import registry
        from maxkernel.tpu_tools.problem.tasks import summarize_task

        try:
            task_id = registry.resolve_id(task)
        except registry.UnknownTaskError as e:
            raise ServerToolError("get_task", str(e)) from None
        return {
            "summary": summarize_task(task_id).model_dump(mode="json"),
            "reference_source": registry.task_path(task_id).read_text(encoding="utf-8"),
        }

    async def describe_reference(self, reference: str, size: str | None = None) -> dict[str, Any]:
        from maxkernel.tpu_tools.problem.program import describe

        try:
            return describe(reference, size).model_dump(mode="json")
        except Exception as e:  # noqa: BLE001 - the reference's own failure, reported as the tool would
            raise ServerToolError("describe_reference", f"{type(e).__name__}: {e}") from None
