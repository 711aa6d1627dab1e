"""MCP resources: read-only views a host can attach to a conversation (tasks, chips, the guide, artifacts)."""

from __future__ import annotations

import json

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError

from maxkernel.server.prompts import task_spec
from maxkernel.server.requests import AppState
from maxkernel.server.tools import task_summaries
from maxkernel.server.workspace import WorkspaceError
from maxkernel.subagents import load_guide
from maxkernel.tpu_tools.hardware.chips import UnknownChipError, get_chip


async def tasks_index() -> str:
    tasks = await anyio.to_thread.run_sync(task_summaries)
    return json.dumps([t.model_dump(mode="json") for t in tasks], indent=2)


def task_resource(task_id: str) -> str:
    try:
        return task_spec(task_id)
    except ToolError as e:
        raise ResourceNotFoundError(str(e)) from None


def chip_resource(name: str) -> str:
    try:
        return get_chip(name).model_dump_json(indent=2)
    except UnknownChipError as e:
        raise ResourceNotFoundError(str(e)) from None


def guide_resource() -> str:
    return load_guide()


def artifact_resource(sha: str, ctx: Context[AppState]) -> str:
    try:
        return ctx.request_context.lifespan_context.workspace.artifact(sha).read_text(encoding="utf-8")
    except WorkspaceError as e:
        raise ResourceNotFoundError(str(e)) from None


def register(server: MCPServer) -> None:
    server.resource(
        "maxkernel://tasks",
        name="tasks",
        description="the JaxBench tasks, summarized",
        mime_type="application/json",
    )(tasks_index)
    server.resource(
        "maxkernel://tasks/{task_id}",
        name="task",
        description="a JaxBench task: summary and the reference source",
        mime_type="text/markdown",
    )(task_resource)
    server.resource(
        "maxkernel://chips/{name}",
        name="chip",
        description="one TPU chip's numbers",
        mime_type="application/json",
    )(chip_resource)
    server.resource(
        "maxkernel://guides/pallas-tpu",
        name="pallas-tpu-guide",
        description="writing Pallas kernels for TPU: tiling, grids, VMEM, common errors and fixes",
        mime_type="text/markdown",
    )(guide_resource)
    server.resource(
        "maxkernel://artifacts/{sha}",
        name="artifact",
        description="a saved kernel (kernels/<sha>.py) or trace summary, by sha256",
        mime_type="text/plain",
    )(artifact_resource)
