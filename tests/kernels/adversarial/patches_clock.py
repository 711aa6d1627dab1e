"""Exploit: a right kernel that replaces time.perf_counter (to fake a speedup when timed)."""

import time

from _pallas import matmul

_real = time.perf_counter
time.perf_counter = lambda: _real() * 0.25


def workload(a, b):
    return matmul(a, b)
