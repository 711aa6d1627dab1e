"""Adversary: start a setsid'd grandchild (`sleep <MARK>`) that should outlive the verdict.

Waits until the grandchild runs, then raises its pid as this job sees it. The test fills MARK and looks
for the grandchild on the host by its command line."""

import ctypes
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
    # libc's system() through ctypes: the judge's audit hook records ctypes (the verdict is `tampered`) but
    # cannot refuse it, so the grandchild really starts and only the OS sandbox can take it down.
    ctypes.CDLL(None).system(f"setsid sleep {MARK} >/dev/null 2>&1 &".encode())
    deadline = time.monotonic() + 10
    while not (pids := _running(MARK)) and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError("SANDBOX-REPORT " + json.dumps({"grandchild_pids": pids}))
