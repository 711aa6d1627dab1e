"""Megacore: how many TensorCores one JAX device splits a Pallas grid across, and what that split is.

On v4 and v5p one JAX device is two TensorCores ("megacore"); Mosaic splits the leading "parallel"
grid axes between them (`pltpu.CORE_PARALLEL` asks for the split explicitly). v5e and v6e have one
TensorCore; tpu-7x has two per chip but exposes each as its own JAX device, so a grid runs on one.
Source: `jax.experimental.pallas.tpu.ChipVersion` (`supports_megacore`, jax 0.10.2) and the Cloud TPU
system-architecture pages (v4, v5p: "two TensorCores per chip"). The estimate divides the parallel
steps by the cores; validation interprets such kernels with one thread per core, so a reduction axis
wrongly marked "parallel" shows up as a race or a wrong answer.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

SOURCE = "jax.experimental.pallas.tpu.ChipVersion.supports_megacore (jax 0.10.2); cloud.google.com/tpu/docs/v4, /v5p"
_MEGACORE_CORES = {"tpu-v4": 2, "tpu-v5p": 2}
_PARALLEL = ("parallel", "core_parallel")


def cores_per_device(chip_name: str | None) -> int:
    """TensorCores behind one JAX device of this chip (2 on megacore chips, else 1; CPU: 1)."""
    return _MEGACORE_CORES.get(chip_name or "", 1)


def _sem_name(entry) -> str:
    return str(getattr(entry, "value", entry)).lower()


def parallel_prefix(dimension_semantics) -> int:
    """How many leading grid axes are parallel (the only ones a core split can take)."""
    count = 0
    for entry in dimension_semantics or ():
        if _sem_name(entry) not in _PARALLEL:
            break
        count += 1
    return count


class CoreSplit(BaseModel):
    """What one core of a megacore device runs of a grid."""

    cores: int = Field(description="TensorCores the grid is split across (1 = no split)")
    steps_total: int
    steps_per_core: int = Field(description="the busiest core's steps (the kernel's critical path)")
    split_axes: int = Field(description="leading parallel axes that were split")
    note: str = ""


def core_split(grid, dimension_semantics, cores: int) -> CoreSplit:
    """Split the parallel subgrid across `cores` (ceil: the busiest core sets the time)."""
    grid = tuple(int(g) for g in (grid or ()))
    total = math.prod(grid) if grid else 1
    n_par = parallel_prefix(dimension_semantics)
    if cores <= 1 or n_par == 0 or not grid:
        why = "" if cores <= 1 else "no leading parallel axis: one core runs the whole grid, the other idles"
        return CoreSplit(
            cores=1 if cores <= 1 else cores, steps_total=total, steps_per_core=total, split_axes=0, note=why
        )
    par = math.prod(grid[:n_par])
    rest = total // par
    per_core = math.ceil(par / cores) * rest
    note = f"{par} parallel steps over {cores} cores"
    if par < cores * 2:
        note += f" (only {par}: a core idles part of the time)"
    return CoreSplit(cores=cores, steps_total=total, steps_per_core=per_core, split_axes=n_par, note=note)


def interpret_cores(chip_name: str | None, pallas_calls) -> int:
    """Threads for TPU interpret mode: one per core when the target splits some kernel's grid."""
    cores = cores_per_device(chip_name)
    if cores <= 1:
        return 1
    for call in pallas_calls or ():
        sem = (
            call.get("dimension_semantics")
            if isinstance(call, dict)
            else getattr(call, "dimension_semantics", None)
        )
        if parallel_prefix(sem):
            return cores
    return 1
