"""MCP side of the example index: the `find_examples` tool, the `maxkernel://examples/{id}` resource, and
the retrieval the MCP prompts use (the same calls the orchestrator makes through the tool).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from maxkernel.server.requests import AppState, resolve_reference
from maxkernel.tpu_tools.examples.index import (
    DEFAULT_BUDGET_TOKENS,
    ExampleError,
    ExampleIndex,
    ExampleSearch,
)

READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


def index_for(ctx: Context[AppState] | None) -> ExampleIndex:
    """The index for the server's folders, reopened per request (milliseconds: the cache file is keyed by
    the files' sizes and mtimes), so a kernel the user just saved in an --examples folder is found."""
    dirs = tuple(getattr(ctx.request_context.lifespan_context, "example_dirs", ())) if ctx else ()
    try:
        return ExampleIndex.open(dirs)
    except ExampleError as e:
        raise ToolError(str(e)) from None


def reference_text(ws, reference: str) -> tuple[str, tuple[str, ...]]:
    """A reference's source and the JaxBench task it is (whose own Pallas reference is not an example)."""
    from maxkernel.jaxbench import registry

    ref = resolve_reference(ws, reference) if ws is not None else registry.resolve_id(reference)
    if Path(ref).is_absolute():
        path = Path(ref)
        path = path / "reference.py" if path.is_dir() else path
        try:
            return path.read_text(encoding="utf-8"), ()
        except OSError as e:
            raise ToolError(f"cannot read reference {reference!r}: {e.strerror}") from None
    return registry.task_path(ref).read_text(encoding="utf-8"), (ref,)


async def find_examples(
    ctx: Context[AppState],
    query: Annotated[str, Field(description="free text, e.g. 'ragged paged attention'")] = "",
    operator: Annotated[
        str | None, Field(description="an operator name, e.g. 'gqa_attention' or 'ragged_dot'")
    ] = None,
    primitives: Annotated[
        list[str], Field(description="primitives a reference uses, e.g. ['jnp.einsum', 'jax.nn.softmax']")
    ] = [],  # noqa: B006 (pydantic copies defaults)
    error: Annotated[str | None, Field(description="a compiler error or failed verdict's text")] = None,
    reference: Annotated[
        str | None,
        Field(
            description="a JaxBench task id or workspace reference path: its CONFIG operator and workload "
            "primitives become the query (the task's own Pallas reference is left out)"
        ),
    ] = None,
    k: Annotated[int, Field(ge=1, le=10, description="how many examples")] = 3,
    budget_tokens: Annotated[
        int, Field(ge=100, le=20000, description="all excerpts together, estimated tokens (characters / 4)")
    ] = DEFAULT_BUDGET_TOKENS,
    kinds: Annotated[
        list[Literal["kernel", "guide"]], Field(description="kernels, guide sections, or both")
    ] = ["kernel", "guide"],  # noqa: B006
    min_score_ratio: Annotated[
        float, Field(ge=0.0, le=1.0, description="drop hits scoring below this fraction of the best")
    ] = 0.0,
) -> ExampleSearch:
    """Working Pallas TPU examples (jax's own ops, JaxBench references, the guide, the user's folders)
    for a query, an operator, a reference's primitives or an error message; top k with source excerpts
    within budget_tokens. Read a whole example at its uri (maxkernel://examples/{id}).
    """
    # unset is None, as on the CLI (`maxkernel examples`)
    operator, error, reference = operator or "", error or "", reference or ""
    if not any(x.strip() for x in (query, operator, error, reference)) and not primitives:
        raise ToolError("give at least one of query, operator, primitives, error or reference")
    st = ctx.request_context.lifespan_context
    ref_src, exclude = reference_text(st.workspace, reference) if reference.strip() else ("", ())
    ix = await anyio.to_thread.run_sync(lambda: index_for(ctx))
    return await anyio.to_thread.run_sync(
        lambda: ix.search(
            query,
            operator=operator,
            primitives=primitives,
            error=error,
            reference_source=ref_src,
            k=k,
            budget_tokens=budget_tokens,
            kinds=kinds,
            exclude_tasks=exclude,
            min_score_ratio=min_score_ratio,
        )
    )


def example_resource(example_id: str, ctx: Context[AppState]) -> str:
    try:
        return index_for(ctx).get(example_id).full_text()
    except (ExampleError, ToolError) as e:
        raise ResourceNotFoundError(str(e)) from None


def register(server: MCPServer) -> None:
    server.tool(title="Find working Pallas kernel examples", annotations=READS)(find_examples)
    server.resource(
        "maxkernel://examples/{example_id}",
        name="example",
        description="one indexed Pallas TPU example: kernel, helpers and the function that launches it",
        mime_type="text/x-python",
    )(example_resource)


def prompt_examples(ctx: Context[AppState] | None, role: str, *, task: str = "", error: str = "") -> list:
    """The best matches a role's MCP prompt includes: by error text for the debugger, else by the task's
    reference (operator and primitives), kernels only (the planner and implementer carry the whole guide).
    Retrieval trouble never blocks a prompt: it then has no examples section."""
    from maxkernel.jaxbench.registry import UnknownTaskError
    from maxkernel.subagents import MAX_EXAMPLES, MIN_SCORE_RATIO, retrieval_budget

    common = {"k": MAX_EXAMPLES, "budget_tokens": retrieval_budget(role), "min_score_ratio": MIN_SCORE_RATIO}
    try:
        ix = index_for(ctx)
        if error.strip():
            # the debugger's prompt already carries the guide sections for this error: kernels only
            return ix.search(error=error, kinds=("kernel",), **common).hits
        if not task.strip():
            return []
        src, exclude = reference_text(None, task)
        return ix.search(
            reference_source=src,
            exclude_tasks=exclude,
            kinds=("kernel",),
            k=3,
            budget_tokens=retrieval_budget(role),
        ).hits
    except (ToolError, ExampleError, UnknownTaskError, OSError):
        return []
