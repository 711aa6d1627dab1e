"""Adversary: start a setsid'd grandchild (`sleep <MARK>`) and hang, for the kill -9 / disconnect tests.

The test fills MARK and finds every process of the pool on the host (by the server's process tree)."""

import ctypes
import time

MARK = "3600.25"


def workload(x):
    # ctypes' system(): recorded by the judge's audit hook (tampered), not refused; the OS sandbox must end it.
    ctypes.CDLL(None).system(f"setsid sleep {MARK} >/dev/null 2>&1 &".encode())
    n, deadline = 0, time.monotonic() + 3600
    while time.monotonic() < deadline:  # busy, as the runaway jobs were (94-101% CPU)
        n += 1
    return x + n
