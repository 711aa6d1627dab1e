"""docs/ide.md's host configs parse, and the command each one names starts the server (stdio, tools listed)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest_paths import ROOT
from mcp import Client, StdioServerParameters

from maxkernel.subagents import TOOL_NAMES

DOC = ROOT / "docs" / "ide.md"
CHECKOUT = "/path/to/maxkernel"
PROJECT = "/path/to/project"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def json_snippets() -> list[dict]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)]


def stdio_entries() -> list[tuple[str, dict]]:
    out = []
    for i, doc in enumerate(json_snippets()):
        for key in ("mcpServers", "servers"):
            entry = doc.get(key, {}).get("maxkernel")
            if entry and "command" in entry:
                out.append((f"snippet{i}-{key}", entry))
    return out


def test_docs_hold_a_config_for_each_host():
    keys = [next(iter(d)) for d in json_snippets()]
    assert keys.count("mcpServers") == 3 and keys.count("servers") == 1  # .mcp.json, gemini, cursor; vscode
    assert any(e.get("timeout", 0) >= 1_800_000 for _, e in stdio_entries())  # gemini's long timeout
    assert "claude mcp add" in DOC.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("name, entry", stdio_entries(), ids=[n for n, _ in stdio_entries()])
async def test_configured_command_starts_and_lists_tools(name, entry, tmp_path):
    # The docs name a venv checkout; here the venv running the tests stands in for it.
    venv_bin = str(Path(sys.executable).parent)

    def sub(s: str) -> str:
        return s.replace(f"{CHECKOUT}/.venv/bin", venv_bin).replace(PROJECT, str(tmp_path))

    assert entry["command"].startswith(CHECKOUT) and entry.get("type", "stdio") == "stdio"
    params = StdioServerParameters(
        command=sub(entry["command"]),
        args=[sub(a) for a in entry.get("args", [])],
        env={**os.environ, **entry.get("env", {})},
        cwd=sub(entry["cwd"]) if "cwd" in entry else None,
    )
    async with Client(params, mode="legacy") as client:  # hosts today speak the 2025-11-25 handshake
        names = {t.name for t in (await client.list_tools()).tools}
    assert names - {"evaluate_kernel"} <= set(TOOL_NAMES) and "compile_kernel" in names
    assert (tmp_path / "maxkernel-work" / "kernels").is_dir()
