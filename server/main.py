"""`maxkernel-server`: serve the evaluation tools over MCP (stdio by default, or streamable HTTP).

HTTP binds 127.0.0.1 unless told otherwise. Binding any other address runs kernels for whoever can
reach the port, so it requires a bearer token (MAXKERNEL_TOKEN or --token-file) and the Host names
clients will use (--allowed-host); without both the server refuses to start (exit 2).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import logging
import os
import sys
from pathlib import Path

from mcp.server.auth.provider import AccessToken, TokenVerifier

log = logging.getLogger("maxkernel.server")


class StaticTokenVerifier(TokenVerifier):
    """Accepts exactly one shared secret (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token.encode()):
            return AccessToken(token=token, client_id="maxkernel-client", scopes=[])
        return None


class StartupError(Exception):
    """The flags ask for an unsafe or impossible setup; the message says how to fix it."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(token_file: str | None) -> str | None:
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as e:
            raise StartupError(f"cannot read --token-file {token_file}: {e.strerror}") from None
        if not token:
            raise StartupError(f"--token-file {token_file} is empty")
        return token
    return os.environ.get("MAXKERNEL_TOKEN", "").strip() or None


def http_security(host: str, port: int, token: str | None, allowed_hosts: list[str]) -> dict:
    """MCPServer / run() keyword arguments for the HTTP transport; refuses unsafe non-loopback binds."""
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.transport_security import TransportSecuritySettings
    from pydantic import AnyHttpUrl

    if not is_loopback(host):
        missing = [
            what
            for what, have in (
                ("a bearer token (export MAXKERNEL_TOKEN or pass --token-file FILE)", token),
                ("the host names clients connect with (--allowed-host NAME, repeatable)", allowed_hosts),
            )
            if not have
        ]
        if missing:
            raise StartupError(
                f"refusing to bind {host}:{port} without " + " and ".join(missing) + "; "
                "or bind 127.0.0.1 (the default)"
            )
    server_kwargs: dict = {}
    run_kwargs: dict = {"host": host, "port": port}
    public = allowed_hosts[0] if allowed_hosts else host
    if token:
        # A static bearer token, not OAuth: no resource_server_url, so the server neither serves
        # protected-resource metadata nor points a 401's WWW-Authenticate at an authorization server.
        # (The SDK requires an issuer_url in AuthSettings; without an auth provider no route serves it.)
        base = f"http://{public}" + ("" if ":" in public else f":{port}")
        server_kwargs["token_verifier"] = StaticTokenVerifier(token)
        server_kwargs["auth"] = AuthSettings(
            issuer_url=AnyHttpUrl(base), resource_server_url=None, validate_token_resource=False
        )
    if allowed_hosts:
        hosts = [h for a in allowed_hosts for h in ([a] if ":" in a else [a, f"{a}:*"])]
        origins = [f"{s}://{h}" for h in allowed_hosts for s in ("http", "https")]
        run_kwargs["transport_security"] = TransportSecuritySettings(
            allowed_hosts=hosts, allowed_origins=origins
        )
    return {"server": server_kwargs, "run": run_kwargs}


def check_port_free(host: str, port: int) -> None:
    """Fail before the banner when the port is taken (uvicorn would print the banner, then exit 3)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is fine
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StartupError(f"port {port} on {host} is already in use: pass --port N") from None
            raise StartupError(f"cannot bind {host}:{port}: {e.strerror}") from None


def build_parser() -> argparse.ArgumentParser:
    from maxkernel.tpu_tools.cli import args as cli_args

    p = cli_args.parser("maxkernel-server", __doc__.splitlines()[0])
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="how clients connect")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address")
    p.add_argument("--port", type=int, default=8765, help="HTTP port")
    p.add_argument("--workspace", default="./maxkernel-work", help="where kernels and artifacts are saved")
    p.add_argument(
        "--token-file", help=f"file holding the HTTP bearer token (default: env {cli_args.TOKEN_ENV})"
    )
    p.add_argument(
        "--allowed-host", action="append", default=[], help="Host header value clients use (repeatable)"
    )
    p.add_argument("--max-workers", type=int, default=2, help="evaluations run at once")
    cli_args.add_timeout(p)
    p.add_argument(
        "--examples",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of your Pallas kernels to index for find_examples (repeatable; also "
        "MAXKERNEL_EXAMPLES, os.pathsep-separated)",
    )
    p.add_argument(
        "--require-sandbox",
        action="store_true",
        help="refuse to start where no OS sandbox (bwrap or namespaces) can isolate evaluations",
    )
    return p


def sandbox_check(require: bool) -> str:
    """The start-up line naming the sandbox tier; StartupError if one is required and none works."""
    from maxkernel.tpu_tools.pool import sandbox

    try:
        decision = sandbox.detect()
    except sandbox.SandboxUnavailable as e:
        raise StartupError(str(e)) from None
    if require or sandbox.require_sandbox_requested():
        if decision.tier == "none":
            raise StartupError(f"--require-sandbox: no OS sandbox here: {decision.note}")
        os.environ["MAXKERNEL_REQUIRE_SANDBOX"] = "1"  # the pool refuses too, should the tier change
    return sandbox.startup_line(decision)


async def serve_stdio(server) -> None:
    """Serve stdio until the client goes; when its stdin closes or the parent process dies, cancel every
    request it started (their evaluations are killed) instead of letting them run to their timeouts."""
    import anyio
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        send, recv = anyio.create_memory_object_stream(0)
        async with anyio.create_task_group() as tg:

            async def pump() -> None:
                async with send:
                    async for message in read_stream:
                        await send.send(message)
                log.info("stdio client disconnected; cancelling its requests")
                tg.cancel_scope.cancel()

            async def orphaned() -> None:
                # A killed parent (orchestrator, IDE) whose pipe is still held open elsewhere: stop too.
                parent = os.getppid()
                while os.getppid() == parent:
                    await anyio.sleep(0.5)
                log.info("parent process %d is gone; cancelling its requests", parent)
                tg.cancel_scope.cancel()

            tg.start_soon(pump)
            tg.start_soon(orphaned)
            await low.run(recv, write_stream, low.create_initialization_options())
            tg.cancel_scope.cancel()


def _is_closed_pipe(e: BaseException) -> bool:
    if isinstance(e, BrokenPipeError | ConnectionResetError):
        return True
    if isinstance(e, BaseExceptionGroup):
        return all(_is_closed_pipe(x) for x in e.exceptions)
    return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="maxkernel-server: %(message)s")
    if args.max_workers < 1:
        print("maxkernel-server: --max-workers should be >= 1", file=sys.stderr)
        return 2
    try:
        security = (
            http_security(args.host, args.port, read_token(args.token_file), args.allowed_host)
            if args.transport == "http"
            else {"server": {}, "run": {}}
        )
        if args.transport == "http":
            check_port_free(args.host, args.port)
        line = sandbox_check(args.require_sandbox)
    except StartupError as e:
        print(f"maxkernel-server: {e}", file=sys.stderr)
        return 2
    log.info(line)

    from maxkernel.server.app import build_server

    hidden = (str(Path(args.token_file).expanduser().resolve()),) if args.token_file else ()
    example_dirs = [*filter(None, os.environ.get("MAXKERNEL_EXAMPLES", "").split(os.pathsep)), *args.examples]
    missing = [d for d in example_dirs if not Path(d).expanduser().is_dir()]
    if missing:
        print(f"maxkernel-server: --examples folder not found: {missing[0]}", file=sys.stderr)
        return 2
    server = build_server(
        args.workspace,
        max_workers=args.max_workers,
        timeout_s=args.timeout,
        hide_paths=hidden,  # no evaluation may read the token, wherever the file lives
        example_dirs=example_dirs,
        **security["server"],
    )
    if args.transport == "stdio":
        try:
            import anyio

            anyio.run(serve_stdio, server)
        except BaseException as e:  # the client went away (closed pipe): exit quietly, not with a traceback
            if not _is_closed_pipe(e):
                raise
            log.info("client closed the stdio pipe; shutting down")
            return 0
    else:
        auth = "bearer token required" if "auth" in security["server"] else "no auth (loopback only)"
        log.info(
            "http://%s:%d/mcp (%s), workspace %s", args.host, args.port, auth, Path(args.workspace).resolve()
        )
        server.run(transport="streamable-http", **security["run"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
