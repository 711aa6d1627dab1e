"""Adversary: double-fork a setsid'd grandchild (`sleep <MARK>`) that should outlive the verdict.

Waits until the grandchild runs, then raises its pid as this job sees it. The test fills MARK and looks
for the grandchild on the host by its command line."""

import json
import os
import time

MARK = "3600.5"


def _running(mark: str) -> list[str]:
    pids = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == b"sleep\0" + mark.encode() + b"\0":
                    pids.append(pid)
        except OSError:
            continue
    return pids


def workload(x):
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", MARK])
        os._exit(0)
    os.waitpid(child, 0)
    deadline = time.monotonic() + 10
    while not (pids := _running(MARK)) and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError("SANDBOX-REPORT " + json.dumps({"grandchild_pids": pids}))
