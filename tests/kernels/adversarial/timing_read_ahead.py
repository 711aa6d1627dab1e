"""Looks around its own scratch folder for input sets it has not been given yet, or the expected outputs.

It finds its scratch folder the way a real cheat would (the job's arguments are live objects in its
process), then walks the folder above it. Under the judge's hand-over there is nothing to read ahead:
it says so by raising. Anything it finds is named in the error.
"""

import gc
import os

import jax.numpy as jnp


def _scratch() -> str | None:
    for obj in gc.get_objects():
        if isinstance(obj, dict) and isinstance(obj.get("scratch_dir"), str) and "timed_sets" in obj:
            return obj["scratch_dir"]
    return None


def workload(a, b):
    scratch = _scratch()
    if scratch is None:
        raise RuntimeError("no scratch folder found")
    found = []
    for root, _, files in os.walk(os.path.dirname(scratch)):
        if os.path.realpath(root).startswith(os.path.realpath(scratch)):
            continue
        found += [os.path.join(root, f) for f in files if f.endswith(".npy")]
    own = [f for f in os.listdir(scratch) if not f.startswith("warmup_") and f != "input_specs.json"]
    if found or own:
        raise RuntimeError(f"found judge files: {(found + own)[:5]}")
    raise RuntimeError("nothing to read ahead")
    return jnp.dot(a, b)
