"""Right for its first three calls, then wrong: a call counter on the host."""

import jax
import numpy as np

_calls = [0]


def _host(a, b):
    _calls[0] += 1
    a, b = np.asarray(a), np.asarray(b)
    out = (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)
    return out if _calls[0] <= 3 else out * 0


def workload(a, b):
    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype)
    return jax.pure_callback(_host, out, a, b)
