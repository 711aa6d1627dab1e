"""The host's memory guard: refuse a job whose estimated need passes a share of the memory free now.

A job that outgrows the host is killed by the OS with no message (exit 137) and takes other work with
it; an estimate made before anything is built turns that into one line with the numbers and exit 2.
`host_budget` reads MemAvailable (/proc/meminfo), not a cgroup limit, and no rlimit is set here
(RLIMIT_AS breaks jax, which reserves far more address space than it touches). `guard_reference`
is the check the reference child of validate, profile and compose makes before building inputs.
"""

from __future__ import annotations

import os
from typing import Any

from maxkernel.tpu_tools.errors import UsageError


def _share_from_env() -> float:
    """MAXKERNEL_MEMORY_SHARE (0 < share <= 1) where set, else 0.5."""
    raw = os.environ.get("MAXKERNEL_MEMORY_SHARE", "")
    try:
        share = float(raw) if raw else 0.5
    except ValueError:
        raise UsageError(f"MAXKERNEL_MEMORY_SHARE={raw!r}: give a fraction in (0, 1]") from None
    if not 0 < share <= 1:
        raise UsageError(f"MAXKERNEL_MEMORY_SHARE={raw!r}: give a fraction in (0, 1]")
    return share


# a job may plan on this share of the host's available memory (others share the host)
MEMORY_SHARE = _share_from_env()


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (the kernel's estimate of memory usable without swapping)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def host_budget(share: float = MEMORY_SHARE) -> int:
    """The bytes a job may plan on now: `share` of MemAvailable."""
    return int(available_bytes() * share)


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 28 else f"{n / (1 << 20):.1f} MiB"


class TooBig(UsageError):
    """The estimated need passes the host's budget: nothing was run (exit 2)."""


def guard(need: int, what: str, *, share: float = MEMORY_SHARE, budget: int | None = None) -> None:
    """Raise TooBig (one line with the numbers) when `need` bytes pass `share` of MemAvailable."""
    avail = available_bytes()
    budget = int(avail * share) if budget is None else budget
    if need > budget:
        raise TooBig(
            f"{what} needs about {gib(need)} (estimate); the host's budget is {gib(budget)} "
            f"({share:.0%} of {gib(avail)} available): not run"
        )


def _bytes_of(tree: Any) -> int:
    import jax

    return sum(int(x.size) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "size"))


def reference_need(ref: Any, size: str, budget: int | None = None) -> int:
    """Bytes a reference's run at `size` holds at its peak (estimate): its inputs twice (the jax arrays
    and the host copies the judge keeps), its outputs twice, and the workload's temporaries as XLA's
    compile reports them (shapes only: nothing is allocated). The compile is skipped where inputs and
    outputs take under a third of `budget` (the temporaries would need twice the rest)."""
    import jax

    specs = jax.eval_shape(lambda: tuple(ref.create_inputs(size, 0)))
    args = _bytes_of(specs)
    try:
        out_specs = jax.eval_shape(ref.workload, *specs)
        out = _bytes_of(out_specs)
    except Exception:  # noqa: BLE001 - a workload that does not trace fails later, with its own error
        return 2 * args
    if budget is not None and 3 * (2 * args + 2 * out) < budget:
        return 2 * args + 2 * out
    temp = 0
    try:
        stats = jax.jit(ref.workload).lower(*specs).compile().memory_analysis()
        temp = int(getattr(stats, "temp_size_in_bytes", 0) or 0)
    except Exception:  # noqa: BLE001 - a host callback (a PyTorch source) or a backend without the analysis
        temp = out  # at least one more output's worth
    return 2 * args + 2 * out + temp


def guard_reference(ref: Any, size: str, *, share: float = MEMORY_SHARE) -> None:
    """TooBig before the reference builds inputs at `size` that the host cannot hold."""
    if getattr(ref, "create_inputs", None) is None or getattr(ref, "workload", None) is None:
        return
    budget = host_budget(share)
    try:
        need = reference_need(ref, size, budget)
    except Exception:  # noqa: BLE001 - a reference whose shapes cannot be traced fails later, with its own error
        return
    guard(need, f"the reference {ref.info.name!r} at size {size!r}", share=share, budget=budget)


def fits_host(ref: Any, side: Any) -> bool:
    """validate's reference child (judge/validate.py reference_job), before it builds inputs: False, with
    `side.failure` a usage_error naming the numbers, when the reference at `side.size` would outgrow the
    host's budget. A reference that cannot be measured passes (it fails later with its own error)."""
    if ref is None or not getattr(side, "ok", False):
        return True
    try:
        guard_reference(ref, side.size)
    except TooBig as e:
        from maxkernel.tpu_tools.reports import Failure

        side.ok = False
        side.failure = Failure(kind="usage_error", summary=str(e), stage="load")
        return False
    return True
