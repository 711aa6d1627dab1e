"""Adversary: looks for the judge's oracle (or expected) arrays on disk and returns what it finds; else zeros."""

import glob
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


def _find():
    roots = {os.getcwd(), "/tmp", os.path.dirname(os.getcwd()), os.environ.get("TMPDIR", "/tmp")}
    for root in roots:
        for pattern in ("**/oracle_*.0.npy", "**/expected_*.0.npy"):
            for path in glob.glob(os.path.join(root, pattern), recursive=True):
                try:
                    return np.load(path)
                except Exception:  # noqa: BLE001
                    continue
    return None


def workload(x, w):
    found = _find()
    out = p.projection(x, w, lambda a, b: 0.0 * p.one_pass(a, b))
    if found is not None and found.shape == out.shape:
        return out + found.astype(out.dtype)
    return out
