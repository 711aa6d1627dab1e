"""Adversary: start a setsid'd grandchild (`sleep <MARK>`) and hang, for the kill -9 / disconnect tests.

The test fills MARK and finds every process of the pool on the host (by the server's process tree)."""

import subprocess
import time

MARK = "3600.25"


def workload(x):
    subprocess.Popen(["sleep", MARK], start_new_session=True)
    n, deadline = 0, time.monotonic() + 3600
    while time.monotonic() < deadline:  # busy, as the runaway jobs were (94-101% CPU)
        n += 1
    return x + n
