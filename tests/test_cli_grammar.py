"""One grammar across maxkernel, maxkernel-orchestrate and maxkernel-server (#13 items 2, 4, 7).

Each test names the bullet it guards. CLI tests run real subprocesses; MCP tests a real in-memory session.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest_paths import MATMUL_REF
from mcp import Client

from maxkernel.server.app import build_server
from maxkernel.tpu_tools import cli_args


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _tool_defaults(tools, name: str) -> dict:
    props = tools[name].input_schema["properties"]
    return {k: v.get("default") for k, v in props.items()}


@pytest.mark.anyio
async def test_mcp_tool_defaults_equal_the_cli_defaults(tmp_path):
    """Defaults are one list: the CLI's parser and every MCP tool's schema take them from cli_args."""
    from maxkernel.clients.cli import build_parser as orchestrate_parser
    from maxkernel.tpu_tools.cli import build_parser

    async with Client(build_server(tmp_path / "ws")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("compile_kernel", "validate_kernel", "profile_kernel", "estimate_kernel", "autotune_kernel"):
        assert _tool_defaults(tools, name)["target"] == cli_args.DEFAULT_TARGET, name
    ev = _tool_defaults(tools, "evaluate_kernel")
    assert ev["compile_target"] == ev["validate_target"] == ev["profile_target"] == cli_args.DEFAULT_TARGET
    val = _tool_defaults(tools, "validate_kernel")
    assert (val["seeds"], val["seed_offset"]) == (cli_args.DEFAULT_SEEDS, cli_args.DEFAULT_SEED_OFFSET)
    assert val["timeout_s"] == cli_args.DEFAULT_TIMEOUT_S

    sub = build_parser()._subparsers._group_actions[0].choices
    for verb in ("compile", "validate", "profile"):
        args = sub[verb].parse_args(["k.py", "--reference", "8p"])
        assert args.target == cli_args.DEFAULT_TARGET and args.size is None, verb
    args = sub["validate"].parse_args(["k.py", "-r", "8p"])
    assert (args.seeds, args.seed_offset, args.timeout) == (
        val["seeds"],
        val["seed_offset"],
        val["timeout_s"],
    )
    assert (
        sub["profile"].parse_args(["k.py", "-r", "8p"]).timeout
        == _tool_defaults(tools, "profile_kernel")["timeout_s"]
    )
    osub = orchestrate_parser()._subparsers._group_actions[0].choices
    for verb in ("auto", "search"):
        assert osub[verb].parse_args([]).target == cli_args.DEFAULT_TARGET, verb


@pytest.mark.anyio
async def test_plan_kernel_renders_for_a_workspace_reference_and_says_why_not(tmp_path):
    """plan_kernel with a reference path renders that module; a bad one gets a precise reason."""
    from mcp.shared.exceptions import MCPError

    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(MATMUL_REF, ws / "my_reference.py")
    async with Client(build_server(ws)) as client:
        plan = await client.get_prompt("plan_kernel", {"task": "my_reference.py"})
        body = plan.messages[0].content.text
        assert Path(MATMUL_REF).read_text().splitlines()[0] in body and "def workload" in body
        with pytest.raises(MCPError, match="nope.py"):
            await client.get_prompt("plan_kernel", {"task": "nope.py"})
        with pytest.raises(MCPError, match="99p_Nope"):
            await client.get_prompt("plan_kernel", {"task": "99p_Nope"})
        with pytest.raises(MCPError, match="prompts need a TPU generation"):
            await client.get_prompt("plan_kernel", {"task": "8p", "target": "cpu"})


def test_server_port_in_use_is_one_line_exit_2_before_the_banner(tmp_path):
    """maxkernel-server on a taken port: one line naming the port, rc 2, no banner, no uvicorn error."""
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "maxkernel.server.main", "--transport", "http", "--port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0], proc.stderr
    assert "http://" not in proc.stderr and not list(tmp_path.iterdir())  # no banner, no workspace
