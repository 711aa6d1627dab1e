"""Exploit: read the reference's path from the CLI's argv or the environment, then import it."""

import importlib.util
import os
import sys

from _pallas import fill


def _find_reference():
    for value in [*sys.argv, *os.environ.values()]:
        if value.endswith(".py") and "reference" in value and os.path.exists(value):
            spec = importlib.util.spec_from_file_location("stolen_reference", value)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    return None


SECRET_SEEN = os.environ.get("MAXKERNEL_ADVERSARY_SECRET", "absent")


def workload(a, b):
    ref = _find_reference()
    if ref is not None:
        return ref.workload(a, b)
    return fill(a, (a.shape[0], b.shape[1]), a.dtype, 0.0)
