"""`--server URL` / `--token` for `auto` and `search`: one way to reach HTTP servers, one auth message.

The MCP SDK turns a 401 into "Server returned an error response", so before connecting each URL is
asked once with plain HTTP: a refused token becomes one line naming the server and the fix.
"""

from __future__ import annotations

from typing import Any

from maxkernel.tpu_tools.cli.args import auth_refused
from maxkernel.tpu_tools.errors import UsageError


def check_auth(url: str, token: str | None, *, timeout_s: float = 10.0) -> None:
    """UsageError if the server at `url` refuses `token` (401/403); an unreachable server is left to
    the connection itself (its error names the server)."""
    import httpx2

    headers = {"Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        r = httpx2.get(url, headers=headers, timeout=timeout_s)
    except httpx2.HTTPError:
        return
    if r.status_code in (401, 403):
        raise UsageError(auth_refused(url, r.status_code))


def http_servers(urls: list[str], token: str | None) -> list[tuple[str, Any]]:
    """(url, transport) for each http(s) URL after the auth check; other specs pass through unchanged."""
    from maxkernel.clients.mcp_client import http_transport

    out: list[tuple[str, Any]] = []
    for url in urls:
        if url.startswith(("http://", "https://")):
            check_auth(url, token)
            out.append((url, http_transport(url, token)))
        else:
            out.append((url, url))
    return out
