"""find_examples, maxkernel://examples/{id} and the prompts' examples over an in-memory MCP session."""

from __future__ import annotations

import pytest
from mcp import Client

from maxkernel.server.app import build_server
from maxkernel.subagents import EXAMPLES_BUDGET_TOKENS

RAGGED = "jax.ragged_paged_attention.kernel.ragged_paged_attention_kernel"
USER_KERNEL = """
import jax
from jax.experimental import pallas as pl


def quokka_scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3


def quokka_scale(x):
    return pl.pallas_call(quokka_scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def client(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "scale.py").write_text(USER_KERNEL)
    async with Client(build_server(tmp_path / "ws", example_dirs=[str(mine)]), raise_exceptions=True) as c:
        yield c


@pytest.mark.anyio
async def test_find_examples_by_text_reference_and_error(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert (
        tools["find_examples"].output_schema is not None and tools["find_examples"].annotations.read_only_hint
    )
    r = await client.call_tool(
        "find_examples", {"query": "ragged paged attention", "k": 2, "budget_tokens": 800}
    )
    out = r.structured_content
    assert not r.is_error and out["hits"][0]["id"] == RAGGED and out["used_tokens"] <= 800
    assert out["token_rule"].startswith("estimated tokens = ceil(characters / 4)")

    r = await client.call_tool("find_examples", {"reference": "6p", "kinds": ["kernel"]})
    ids = [h["id"] for h in r.structured_content["hits"]]
    assert ids[0].startswith("jax.paged_attention.") and r.structured_content["mode"] == "task"

    r = await client.call_tool(
        "find_examples", {"error": "Unimplemented primitive in Pallas TPU lowering for tc: sort"}
    )
    assert r.structured_content["hits"][0]["id"] == "guide.common-errors-and-fixes"

    r = await client.call_tool("find_examples", {"query": "quokka scale"})
    assert r.structured_content["hits"][0]["source"] == "user"


@pytest.mark.anyio
async def test_bad_requests_are_tool_errors(client):
    r = await client.call_tool("find_examples", {})
    assert r.is_error and "give at least one of" in r.content[0].text
    r = await client.call_tool("find_examples", {"reference": "99z_Nope"})
    assert r.is_error


@pytest.mark.anyio
async def test_example_resource(client):
    res = await client.read_resource(f"maxkernel://examples/{RAGGED}")
    text = res.contents[0].text
    assert "def ragged_paged_attention_kernel" in text and "pl.pallas_call" in text and "jax 0." in text
    with pytest.raises(Exception, match="no example"):
        await client.read_resource("maxkernel://examples/jax.nope")


@pytest.mark.anyio
async def test_prompts_carry_examples_within_budget(client):
    plan = (await client.get_prompt("plan_kernel", {"task": "11p"})).messages[0].content.text
    section = plan[plan.index("## Working examples") :]
    section = section[: section.find("\n## ", 5)] if "\n## " in section[5:] else section
    assert "jax.megablox.gmm.kernel" in section and len(section) / 4 <= EXAMPLES_BUDGET_TOKENS["planner"]
    impl = (
        (await client.get_prompt("implement_kernel", {"plan": "{}", "task": "8p"})).messages[0].content.text
    )
    assert "## Working examples" in impl and "jaxbench.8p_GEMM" not in impl.split("## Working examples")[1]
    dbg = await client.get_prompt(
        "debug_kernel", {"kernel": "x = 1", "error": "RESOURCE_EXHAUSTED: would exceed memory space=vmem"}
    )
    text = dbg.messages[0].content.text
    assert "## Working examples" in text and "vmem_limit_bytes set" in text
