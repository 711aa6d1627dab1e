"""Exploit: output NaN everywhere (with --seeds 0 it was reported as correct)."""

from _pallas import fill


def workload(a, b):
    return fill(a, (a.shape[0], b.shape[1]), a.dtype, float("nan"))
