"""Exploit: a real tiled matmul up to 1024 rows, zeros above (a switch past the old derived size's
384 rows, far below the target's 4096)."""

from _pallas import fill, matmul


def workload(a, b):
    if a.shape[0] > 1024:
        return fill(a, (a.shape[0], b.shape[1]), a.dtype, 0.0)
    return matmul(a, b)
