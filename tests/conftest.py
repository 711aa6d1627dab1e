"""Shared test switches. Network: tests may talk to 127.0.0.1 only, so no real model call can happen.
Traces: profiles without a trace dir write under a per-session temporary dir, removed at the end; so
does the example index's cache.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import shutil
import socket
import tempfile

import pytest

# The caches (the tuned configs autotune and search write, the example index): never the user's own
# during tests, one per test process, removed at its end.
_cache = tempfile.mkdtemp(prefix="maxkernel-test-cache-")
os.environ["MAXKERNEL_CACHE_DIR"] = _cache
atexit.register(shutil.rmtree, _cache, ignore_errors=True)
if "MAXKERNEL_TRACE_DIR" not in os.environ:  # set before any worker pool forks its server
    _traces = tempfile.mkdtemp(prefix="maxkernel-test-traces-")
    os.environ["MAXKERNEL_TRACE_DIR"] = _traces
    atexit.register(shutil.rmtree, _traces, ignore_errors=True)


class NetworkRefused(RuntimeError):
    """A test tried to reach a non-loopback address (RuntimeError, so no client retries it as a blip)."""


def _is_loopback(host: object) -> bool:
    if host in (None, "localhost", b"localhost"):
        return True
    try:
        return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host)).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _refuse_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def check(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):  # type: ignore[index]
            raise NetworkRefused(f"tests may not reach {address!r}: only loopback is allowed")

    def connect(sock: socket.socket, address: object) -> None:
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: object) -> int:
        check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> list:
        if not _is_loopback(host):
            raise NetworkRefused(f"tests may not resolve {host!r}: only loopback is allowed")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
