"""Trace as the target chip: what a kernel that asks for the chip at trace time sees.

Shared by the judged side (candidates) and the reference side (a Pallas reference, problem/chip_program.py).

Kernels pick blocks and code paths from the chip they are traced for: `pltpu.get_tpu_info()` (jax's
emit_pipeline, tokamax's ops) reads the abstract mesh's device, else the default device; tokamax's ops
refuse to run unless the default device is a TPU. Compile traces for a libtpu compile-only device of the
target's topology; validation traces the same way and then interprets the traced program on CPU, so
both see the chip the kernel is written for. Nothing is faked: the device is libtpu's own compile-only
device for that topology, and only tracing happens under it (the program runs on CPU, interpreted).

What this cannot change: `jax.devices()` lists the backend's devices, the host's CPU off the chip
(jax's ragged paged attention looks its tuned blocks up by `jax.devices()[0].device_kind`). Making it
list the TPU would make the CPU run nothing; such a kernel needs its tunables passed.
"""

from __future__ import annotations

import contextlib

from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import Target


def target_device(target: Target):
    """libtpu's compile-only device for the target's topology, or None without libtpu."""
    if target.kind != "tpu" or target.chip is None:
        return None
    try:
        return execution.aot_sharding(target).mesh.devices.flat[0]
    except Exception:  # noqa: BLE001 - no libtpu: the abstract mesh still names the chip
        return None


@contextlib.contextmanager
def trace_as_target(target: Target):
    """Within: the abstract mesh is the target's device, and so is the default device (libtpu's
    compile-only one). Only for tracing: a computation run within would be placed on a device that
    cannot execute."""
    import jax

    device = target_device(target)
    with execution.abstract_tpu_mesh(target):
        if device is None:
            yield
            return
        with jax.default_device(device):
            yield


def traced_as(target: Target) -> str:
    """The words for the verdict: which device kind the kernel saw while traced."""
    device = target_device(target)
    if device is not None:
        return f"traced as the {device.device_kind} (libtpu compile-only {target.chip.topology} device)"
    return f"traced as the {target.chip.device_kind} (abstract device; libtpu unavailable)"
