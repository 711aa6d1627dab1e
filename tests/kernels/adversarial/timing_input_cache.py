"""An input-keyed cache behind a host callback: a hit costs a hash, a miss a numpy matmul.

With the same inputs in warm-up and timing (or two rotated sets) every timed call hits and it looks
several times faster than the work it does. With a fresh set per timed call it never hits. Each call
appends "hit" or "miss" to LOG beside this file (where it may write), so a test can see which calls hit.
"""

import hashlib
from pathlib import Path

import jax
import numpy as np

_cache: dict[bytes, np.ndarray] = {}
LOG = Path(__file__).with_suffix(".log")


def _host(a, b):
    a, b = np.asarray(a), np.asarray(b)
    key = hashlib.blake2b(a.tobytes() + b.tobytes(), digest_size=16).digest()
    hit = _cache.get(key)
    try:  # an OS sandbox makes this folder read-only: the log is then simply not kept
        with LOG.open("a") as f:
            f.write("miss\n" if hit is None else "hit\n")
    except OSError:
        pass
    if hit is None:
        hit = _cache[key] = (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)
    return hit


def workload(a, b):
    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype)
    return jax.pure_callback(_host, out, a, b)
