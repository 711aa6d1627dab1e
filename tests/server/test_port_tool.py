"""The `port_source` tool and `port_to_jax` prompt over a real in-memory MCP session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from maxkernel.server.app import build_server

SOURCES = Path(__file__).parents[1] / "tpu_tools" / "port" / "sources"
PORTS = Path(__file__).parents[1] / "tpu_tools" / "port" / "ports"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_port_to_jax_prompt_carries_the_source_and_the_check(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(SOURCES / "dense_relu.py", ws / "dense_relu.py")
    async with Client(build_server(ws)) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert "port_to_jax" in prompts
        body = (await client.get_prompt("port_to_jax", {"source": "dense_relu.py"})).messages[0].content.text
        assert "self.fc1 = nn.Linear(d, h)" in body  # the source inline
        assert "SOURCE_PARAMS" in body and 'port_source` tool with `source="dense_relu.py"' in body
        with pytest.raises(MCPError, match="source:"):
            await client.get_prompt("port_to_jax", {"source": "missing.py"})
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "port_source" in tools


@pytest.mark.slow  # a child process importing torch and jax: 5-30 s on a loaded 2-core box
@pytest.mark.anyio
async def test_port_source_tool_refuses_bad_input_in_one_line(tmp_path):
    pytest.importorskip("torch")
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(SOURCES / "no_model.py", ws / "no_model.py")
    async with Client(build_server(ws)) as client:
        r = await client.call_tool("port_source", {"source": "no_model.py"})
        assert r.is_error
        assert "no Model" in r.content[0].text and "Traceback" not in r.content[0].text
        r = await client.call_tool("port_source", {"source": "../outside.py"})
        assert r.is_error and "outside the workspace" in r.content[0].text


@pytest.mark.slow
@pytest.mark.anyio
async def test_port_source_tool_checks_a_port_and_refuses_an_adversary(tmp_path):
    pytest.importorskip("torch")
    ws = tmp_path / "ws"
    ws.mkdir()
    for f in (SOURCES / "dense_relu.py", PORTS / "dense_relu_by_hand.py", PORTS / "drops_bias.py"):
        shutil.copy(f, ws / f.name)
    async with Client(build_server(ws)) as client:
        ok = await client.call_tool(
            "port_source", {"source": "dense_relu.py", "check": "dense_relu_by_hand.py", "seeds": 2}
        )
        assert not ok.is_error
        assert ok.structured_content["ok"] and ok.structured_content["check"]["status"] == "match"
        bad = await client.call_tool(
            "port_source", {"source": "dense_relu.py", "check": "drops_bias.py", "seeds": 2}
        )
        assert not bad.is_error  # a refused port is a verdict, not a tool error
        assert bad.structured_content["status"] == "refused"
        assert bad.structured_content["check"]["status"] == "mismatch"
