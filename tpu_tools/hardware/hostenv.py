"""Process environment for JAX on hosts with and without a TPU; applied before jax is imported.

On a host without TPU chips, libtpu (installed for compile-only topology devices) must not try to
claim a chip: JAX's default backend search would initialise the TPU plugin and take the libtpu
lockfile, so concurrent processes (pool children, tests) fail with "Internal error when accessing
libtpu multi-process lockfile". There we pin the runtime backend to CPU; TPU compiles still go
through `topologies.get_topology_desc`, which works under JAX_PLATFORMS=cpu.
"""

from __future__ import annotations

import glob
import importlib.util
import os


def has_tpu_devices() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def has_gpu_plugin() -> bool:
    return any(
        importlib.util.find_spec(m) is not None
        for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin")
    )


def configure() -> None:
    """Idempotent; respects anything the user already set."""
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    if not has_tpu_devices():
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        if not has_gpu_plugin():
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
