"""Looks for the reference in its own process (sys.modules, then every live function) to return its answer.

Under separation there is nothing to find, so it says so by raising.
"""

import gc
import sys
import types


def _find_reference():
    me = sys.modules.get(__name__)
    for mod in list(sys.modules.values()):
        if mod is not me and hasattr(mod, "create_inputs") and callable(getattr(mod, "workload", None)):
            return mod.workload
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__name__ in ("workload", "create_inputs"):
            mod = sys.modules.get(obj.__module__)
            if mod is not me and obj.__globals__.get("create_inputs") is not None:
                return obj.__globals__.get("workload")
    return None


def workload(a, b):
    ref = _find_reference()
    if ref is None:
        raise RuntimeError("reference not reachable from the candidate's process")
    return ref(a, b)
