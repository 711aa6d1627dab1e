"""The judge's timing loop, as it runs inside a timed child (the reference's or the candidate's process).

Both sides run this same loop, so the parent can compare like with like. The child announces
`timing:ready n` when it has warmed up; only then does the parent deliver timed set 0 into the
child's scratch folder, and set i+1 only after the child announced `timing:done i`. Each timed call
is therefore the first call on an input set nobody in that process has seen before: an input-keyed
cache never hits, and no later set exists anywhere the process can reach while an earlier one runs.
The outputs of every timed call are written beside its inputs before `done` is sent; the parent
compares them with the reference's (see profile.py) in a process that never runs candidate code.

The clock is the `time.perf_counter` this module bound when it was imported, before any candidate
code; `clock_fingerprints` lets the caller prove afterwards that neither it nor `time.perf_counter`,
`jax.block_until_ready` or the progress pipe were swapped. The parent does not trust these samples
anyway: it timestamps every delivery and every `done` itself (timing_checks.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from maxkernel.tpu_tools.pool import handover
from maxkernel.tpu_tools.pool.child import report_progress
from maxkernel.tpu_tools.reports import ArraySpec

_clock = time.perf_counter  # bound before any candidate code is imported
_sleep = time.sleep
READY = "timing:ready"
DONE = "timing:done"
INPUTS = "inputs"
OUTPUTS = "outputs"
POLL_S = 0.0002
WAIT_LIMIT_S = 120.0


class DeliveryTimeout(RuntimeError):
    """The parent never delivered the next timed set (it died, or gave up on this child)."""


def set_dir(scratch: str | Path, i: int) -> Path:
    return Path(scratch) / f"timed_{i}"


def to_numpy(tree) -> list:
    import jax
    import numpy as np

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def _wait_for(path: Path) -> None:
    deadline = _clock() + WAIT_LIMIT_S
    while not path.exists():
        if _clock() > deadline:
            raise DeliveryTimeout(f"no timed input set arrived at {path.name} within {WAIT_LIMIT_S:.0f} s")
        _sleep(POLL_S)


def output_leaves_are_arrays(out) -> bool:
    """Every output leaf is a concrete jax array (an object with its own block_until_ready could lie)."""
    import jax
    from jax._src.array import ArrayImpl

    return all(type(x) is ArrayImpl for x in jax.tree_util.tree_leaves(out))


def run_timed_calls(fn: Callable, scratch: str | Path, n: int, input_specs: list[ArraySpec]) -> list[float]:
    """Time `fn` once on each of n delivered sets; returns wall ms per call (this process's clock)."""
    import jax

    report_progress(f"{READY} {n}")
    samples: list[float] = []
    for i in range(n):
        folder = set_dir(scratch, i)
        _wait_for(folder / f"{INPUTS}.json")
        args = jax.block_until_ready(
            handover.as_jax(handover.load_arrays(folder, INPUTS, expect=input_specs))
        )
        t0 = _clock()
        out = fn(*args)
        jax.block_until_ready(out)
        dt = _clock() - t0
        if not output_leaves_are_arrays(out):
            raise TypeError("the timed call returned something other than jax arrays")
        samples.append(dt * 1e3)
        handover.save_arrays(folder, OUTPUTS, to_numpy(out))
        report_progress(f"{DONE} {i}")
    return samples


def clock_fingerprints() -> dict[str, str]:
    """Identity + code of the functions the timing relies on; compare before and after candidate code ran."""
    import hashlib

    import jax
    from jax._src.array import ArrayImpl

    from maxkernel.tpu_tools.pool import child as pool_child

    this = __import__(__name__, fromlist=["_clock"])
    watched = {
        "time.perf_counter": time.perf_counter,
        "time.monotonic": time.monotonic,
        "timed_loop._clock": this._clock,
        "timed_loop.run_timed_calls": this.run_timed_calls,
        "jax.block_until_ready": jax.block_until_ready,
        "ArrayImpl.block_until_ready": ArrayImpl.block_until_ready,
        "pool_child.report_progress": pool_child.report_progress,
        "timed_loop.report_progress": this.report_progress,
        "handover.save_arrays": handover.save_arrays,
        "handover.load_arrays": handover.load_arrays,
    }
    out = {}
    for name, obj in watched.items():
        code = getattr(obj, "__code__", None)
        body = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16] if code else "-"
        out[name] = f"{id(obj):x}:{body}"
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before if after.get(k) != before[k])
