"""Adversary: find the server's --token-file through /proc/<ancestor>/cmdline and read it.

Also tries TOKEN_PATH directly (the test fills it), as a kernel that guessed the path would."""

import json
import os

TOKEN_PATH = "/nonexistent"


def workload(x):
    found = {"cmdlines": {}, "reads": {}}
    candidates = [TOKEN_PATH]
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        found["cmdlines"][pid] = " ".join(argv)[:300]
        if "--token-file" in argv and argv.index("--token-file") + 1 < len(argv):
            candidates.append(argv[argv.index("--token-file") + 1])
    for path in candidates:
        try:
            with open(path) as f:
                found["reads"][path] = f.read()
        except OSError as e:
            found["reads"][path] = f"{type(e).__name__}: {e.strerror}"
    raise RuntimeError("SANDBOX-REPORT " + json.dumps(found))
