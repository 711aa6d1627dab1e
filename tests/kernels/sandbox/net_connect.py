"""Adversary: connect to a listener on 127.0.0.1 and send a message. The test fills PORT.

Against y = x + 1 (plus_one_reference). Raises its findings as one line, so they reach the verdict."""

import json
import socket

PORT = 0


def workload(x):
    found = {}
    for host in ("127.0.0.1", "localhost"):
        try:
            with socket.create_connection((host, PORT), timeout=3) as s:
                s.sendall(b"LEAKED-FROM-SANDBOX")
            found[host] = "connected"
        except OSError as e:
            found[host] = f"{type(e).__name__}: {e.strerror or e}"
    raise RuntimeError("SANDBOX-REPORT " + json.dumps(found))
