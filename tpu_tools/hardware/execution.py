"""How a target is served in this process: natively on a present chip, or AOT-compiled + interpreted on CPU.

Runs inside pool children (it touches jax devices).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass

from maxkernel.tpu_tools.hardware.targets import Target


@dataclass(frozen=True)
class ExecutionPlan:
    target: Target
    native: bool  # the candidate compiles and runs on a device of the target kind in this process
    description: str


def local_device_kind() -> str:
    import jax

    return jax.devices()[0].device_kind


def plan_for(target: Target) -> ExecutionPlan:
    import jax

    platform = jax.devices()[0].platform
    if target.kind == "cpu":
        return ExecutionPlan(target, False, "CPU: Pallas kernels run in TPU interpret mode")
    if target.kind == "local":
        native = platform != "cpu"
        what = f"local {platform} device ({local_device_kind()})"
        return ExecutionPlan(
            target, native, what if native else "local CPU: Pallas kernels run in TPU interpret mode"
        )
    assert target.chip is not None
    if platform == "tpu" and local_device_kind().lower() == target.chip.device_kind.lower():
        return ExecutionPlan(target, True, f"on the {target.chip.device_kind} chip present here")
    # Only what this plan does: a compile for the target is the compile job's to report, when it ran.
    return ExecutionPlan(target, False, f"{target.chip.name} absent: TPU interpret mode on CPU")


@functools.cache
def _topology(topology: str):
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    from jax.experimental import topologies

    return topologies.get_topology_desc(topology, "tpu")


def aot_sharding(target: Target):
    """A NamedSharding on one compile-only device of the target's topology (libtpu, no chip needed)."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    assert target.chip is not None
    topo = _topology(target.chip.topology)
    return NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())


@contextlib.contextmanager
def abstract_tpu_mesh(target: Target):
    """Trace as if on the target chip, so kernels that query the chip kind (emit_pipeline, int division) trace."""
    import jax
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType

    assert target.chip is not None
    try:
        dev = _topology(target.chip.topology).devices[0]
        kind, cores = dev.device_kind, getattr(dev, "num_cores", 1)
    except Exception:  # no libtpu: the chip table still names the device kind
        kind, cores = target.chip.device_kind, 1
    mesh = AbstractMesh(
        (1,),
        ("x",),
        (AxisType.Auto,),
        abstract_device=AbstractDevice(device_kind=kind, num_cores=cores, platform="tpu"),
    )
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def interpret_params(detect_races: bool = False, cores: int = 1, eager_dma: bool = False):
    """TPU interpret mode's settings: race detection, one thread per TensorCore, eager remote DMAs.

    `eager_dma` for kernels over a mesh: in the default "on_wait" mode, jax 0.10.2's interpreter runs a
    remote copy only when its *sender* waits, so a receiver that waits on its receive semaphore can read
    the slot before the data lands (jax's own `all_gather` then reports races and wrong rows on 4 CPU
    devices, while it is exact and race-free eagerly). Eager copies plus race detection still catch a
    kernel that reads a buffer before waiting on its DMA: the read races with the copy in flight.
    """
    from jax.experimental.pallas import tpu as pltpu

    extra = {"dma_execution_mode": "eager"} if eager_dma else {}
    return pltpu.InterpretParams(detect_races=detect_races, num_cores_or_threads=cores, **extra)


@contextlib.contextmanager
def tpu_interpret_mode(detect_races: bool = False, cores: int = 1, eager_dma: bool = False):
    """Run Pallas TPU kernels (written with interpret=False) in TPU interpret mode without editing them.

    `cores` > 1 interprets with one thread per TensorCore (megacore targets), splitting "parallel" axes;
    `eager_dma` runs remote DMAs eagerly (kernels over a mesh, see `interpret_params`).
    """
    from jax.experimental.pallas import tpu as pltpu

    params = interpret_params(detect_races, cores, eager_dma)
    try:
        with pltpu.force_tpu_interpret_mode(params):
            yield
    finally:
        pltpu.reset_tpu_interpret_mode_state()


def races_found() -> bool:
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    return bool(ipc.races is not None and ipc.races.races_found)
