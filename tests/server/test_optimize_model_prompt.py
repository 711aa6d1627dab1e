"""The `optimize_model` prompt over a real in-memory MCP session: listed, rendered, bad arguments refused."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from maxkernel.server.app import build_server


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_optimize_model_walks_hotspots_extract_loop_compose(tmp_path):
    async with Client(build_server(tmp_path / "ws")) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert "optimize_model" in prompts
        assert {a.name for a in prompts["optimize_model"].arguments if a.required} == {"model"}
        got = await client.get_prompt(
            "optimize_model", {"model": "llama3_8b_layer", "target": "tpu-v5e", "top": "2"}
        )
        body = got.messages[0].content.text
        # the steps in order, each naming the tool or prompt that does it
        steps = ["find_hotspots", "extract_region", "plan_kernel", "validate_kernel", "estimate_kernel",
                 "compose_kernels"]  # fmt: skip
        at = [body.index(s) for s in steps]
        assert at == sorted(at), body
        assert "model='llama3_8b_layer'" in body and "target='tpu-v5e'" in body and "top 2 regions" in body
        assert "static estimate" in body and "maxkernel-orchestrate model llama3_8b_layer --top 2" in body
        for bad, needle in [
            ({"model": "no_such_model"}, "model:"),
            ({"model": "llama3_8b_layer", "top": "0"}, "at least 1"),
            ({"model": "llama3_8b_layer", "target": "cpu"}, "TPU generation"),
        ]:
            with pytest.raises(MCPError, match=needle):
                await client.get_prompt("optimize_model", bad)
