"""The real entry point as a subprocess: evaluate_kernel over stdio; HTTP with a bearer token; unsafe binds refused."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from conftest_paths import MATMUL_REF, ROOT
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

SERVER = str(Path(sys.executable).parent / "maxkernel-server")
GOOD_SOURCE = (ROOT / "examples" / "matmul_kernel.py").read_text()
TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def ws(tmp_path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(MATMUL_REF, ws / "ref.py")
    return ws


@pytest.mark.slow
@pytest.mark.anyio
async def test_evaluate_kernel_end_to_end_over_stdio(ws):
    params = StdioServerParameters(
        command=SERVER, args=["--workspace", str(ws), "--max-workers", "1"], env=dict(os.environ)
    )
    stages = []

    async def on_progress(progress, total, message):
        stages.append(message)

    async with Client(params, mode="legacy", read_timeout_seconds=600) as client:
        r = await client.call_tool(
            "evaluate_kernel",
            {"kernel_source": GOOD_SOURCE, "reference": "ref.py", "seeds": 1, "reps": 3},
            progress_callback=on_progress,
        )
    assert not r.is_error, r.content[0].text
    rep = r.structured_content
    assert rep["ok"] is True and rep["stopped_at"] is None, rep
    assert rep["compile"]["compiler"] == "mosaic-tpu-aot"
    assert rep["validation"]["ok"] is True
    assert rep["profile"]["ok"] is True and rep["profile"]["speedup"] is None  # no chip here: no speedup
    assert Path(rep["kernel_path"]).parent == ws.resolve() / "kernels"
    assert stages[0] == "compile: compile" and any(s.startswith("validate: ") for s in stages)
    assert any(s.startswith("profile: ") for s in stages)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError("server did not start listening")


@pytest.fixture
def http_server(ws):
    port = _free_port()
    env = {**os.environ, "MAXKERNEL_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [SERVER, "--transport", "http", "--port", str(port), "--workspace", str(ws)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.anyio
async def test_http_requires_the_bearer_token(http_server):
    async with httpx2.AsyncClient() as http:
        r = await http.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code == 401
        assert "Bearer" in r.headers["www-authenticate"]
        # a static token is not OAuth: no metadata advertised, none served (#13 item 7)
        assert "resource_metadata" not in r.headers["www-authenticate"]
        base = http_server.removesuffix("/mcp")
        for meta in (
            "oauth-protected-resource/mcp",
            "oauth-protected-resource",
            "oauth-authorization-server",
        ):
            assert (await http.get(f"{base}/.well-known/{meta}")).status_code == 404, meta
        r = await http.post(
            http_server,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer wrong"},
        )
        assert r.status_code == 401
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=None)) as http:
        async with Client(streamable_http_client(http_server, http_client=http)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "evaluate_kernel" in names
            r = await client.call_tool("get_task", {"task": "8p"})
            assert not r.is_error and r.structured_content["summary"]["id"] == "8p_GEMM"


@pytest.mark.parametrize(
    "argv, env, missing",
    [
        (["--host", "0.0.0.0"], {}, ["bearer token", "--allowed-host"]),
        (["--host", "0.0.0.0", "--allowed-host", "kernels.example.com"], {}, ["bearer token"]),
        (["--host", "0.0.0.0"], {"MAXKERNEL_TOKEN": TOKEN}, ["--allowed-host"]),
        (["--host", "0.0.0.0", "--token-file", "/nonexistent/token"], {}, ["cannot read --token-file"]),
    ],
)
def test_non_loopback_bind_without_token_and_hosts_refuses_to_start(ws, argv, env, missing):
    base = {k: v for k, v in os.environ.items() if k != "MAXKERNEL_TOKEN"}
    proc = subprocess.run(
        [SERVER, "--transport", "http", "--workspace", str(ws), *argv],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    for word in missing:
        assert word in proc.stderr
