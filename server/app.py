"""Build the MCP server: tools, prompts and resources over one workspace and one bounded worker pool.

`build_server` returns a fresh server each call (tests get their own); the lifespan owns the pool it
creates and closes it, killing any evaluation still running, when the server stops.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server import MCPServer

from maxkernel.server import examples, prompts, resources, tools
from maxkernel.server.requests import AppState
from maxkernel.server.workspace import Workspace
from maxkernel.tpu_tools.judge.evaluate import DEFAULT_TIMEOUT_S, Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

INSTRUCTIONS = """\
Tools to write Pallas kernels for TPUs and check them with the real compiler and fresh inputs.
Send a kernel as `kernel_source` (module text; saved under kernels/<sha256>.py) or `kernel_path` (a
file in the workspace). `reference` is a JaxBench task id (see list_tasks) or a workspace path.
A negative verdict is a result with ok=false and a classified `failure`, not an error. Evaluations
take seconds to minutes and report progress; they queue on a bounded pool of worker processes.
Interpret-mode timings on CPU are not TPU speedups. Before writing or fixing a kernel, find_examples
returns working Pallas TPU kernels (jax's own ops, JaxBench references, your --examples folders) for a
task, an operator or an error message."""


def build_server(
    workspace: str | os.PathLike,
    pool: WorkerPool | None = None,
    *,
    max_workers: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    hide_paths: tuple[str, ...] = (),
    example_dirs: tuple[str, ...] | list[str] = (),
    **server_kwargs: Any,
) -> MCPServer:
    """A server over `workspace`; `pool` is borrowed (not closed) if given, else created per lifespan.

    `hide_paths` are masked in every evaluation's sandbox (the server's --token-file).
    `example_dirs`: the user's kernel folders, indexed beside jax's ops for find_examples.

    `server_kwargs` go to MCPServer (e.g. `token_verifier=` and `auth=` for HTTP).
    """
    ws = Workspace(workspace)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[AppState]:
        own = pool is None
        p = pool or WorkerPool(max_workers=max_workers, hide_paths=hide_paths)
        try:
            yield AppState(
                workspace=ws,
                pool=p,
                evaluator=Evaluator(p, timeout_s=timeout_s),
                example_dirs=tuple(str(d) for d in example_dirs),
            )
        finally:
            if own:
                p.close()

    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("maxkernel")
    except PackageNotFoundError:
        v = "0"
    server = MCPServer("maxkernel", version=v, instructions=INSTRUCTIONS, lifespan=lifespan, **server_kwargs)
    tools.register(server)
    prompts.register(server)
    resources.register(server)
    examples.register(server)
    return server
