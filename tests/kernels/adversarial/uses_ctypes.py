"""Exploit: reach raw memory with ctypes (it could rewrite the judge's code objects in place)."""

import ctypes

from _pallas import matmul

_probe = ctypes.c_char.from_address(id(matmul))  # a read of the function object's own bytes


def workload(a, b):
    return matmul(a, b)
