"""Kernels over a device mesh: the reference's optional `MESH`, and the meshes a job runs it on.

A multi-chip reference declares

    MESH = {"axes": {"x": 4}, "in_specs": [["x", None], [None, "x"]], "out_specs": [None, "x"]}

(axis names and sizes in mesh order; one PartitionSpec per input and one for the single output, each a
list with an axis name or None per array dimension; tuple outputs are not supported yet). Its `workload` is the global computation; a candidate gets
the same global arrays, sharded by `in_specs`, and runs under `jax.set_mesh(mesh)`, so it may
`jax.shard_map` without naming a mesh and use remote DMAs, semaphores and `collective_id` inside.

Off the chip the same kernel is (a) compiled by the real Mosaic compiler for a TPU topology of that
many chips (`topology_name`), and (b) run in TPU interpret mode on that many CPU devices
(`host_device_flag` must be in XLA_FLAGS before the CPU backend starts, with `host_threads_env`:
fewer client threads than devices deadlocks it). Remote DMAs are interpreted
with `dma_execution_mode="eager"` (see `execution.interpret_params`).
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.hardware import execution

if TYPE_CHECKING:
    from maxkernel.tpu_tools.hardware.targets import Target

MAX_DEVICES = 64  # CPU devices one validation child may start with (JobSpec.host_devices)
SpecEntry = str | None
Spec = list[SpecEntry] | None

# Topologies of the real compiler for N chips, per generation (libtpu topology names).
_TOPOLOGIES: dict[str, dict[int, str]] = {
    "tpu-v4": {1: "v4:1x1x1", 2: "v4:2x1x1", 4: "v4:2x2x1", 8: "v4:2x2x2"},
    "tpu-v5e": {1: "v5e:1x1", 2: "v5e:2x1", 4: "v5e:2x2", 8: "v5e:2x4"},
    "tpu-v5p": {1: "v5p:1x1x1", 2: "v5p:2x1x1", 4: "v5p:2x2x1", 8: "v5p:2x2x2"},
    "tpu-v6e": {1: "v6e:1x1", 2: "v6e:2x1", 4: "v6e:2x2", 8: "v6e:2x4"},
    "tpu-7x": {1: "tpu7x:1x1x1", 2: "tpu7x:2x1x1", 4: "tpu7x:2x2x1", 8: "tpu7x:2x2x2"},
}


class MeshSpec(BaseModel):
    """A reference's device mesh: what the verdict says it ran on."""

    model_config = ConfigDict(frozen=True)

    axes: dict[str, int] = Field(description="axis name -> size, in mesh order")
    in_specs: list[Spec] = Field(description="one PartitionSpec per input (axis name or None per dim)")
    out_specs: Spec = Field(description="the (single) output's PartitionSpec")

    @field_validator("axes")
    @classmethod
    def _positive(cls, axes: dict[str, int]) -> dict[str, int]:
        if not axes or any(int(v) < 1 for v in axes.values()):
            raise ValueError(f"MESH axes should be a non-empty name -> size >= 1 mapping, got {axes}")
        if math.prod(axes.values()) > MAX_DEVICES:
            raise ValueError(f"MESH asks for {math.prod(axes.values())} devices; at most {MAX_DEVICES}")
        return axes

    @property
    def device_count(self) -> int:
        return math.prod(self.axes.values())

    def share(self, x: float | None) -> float | None:
        """One chip's share of a whole-mesh quantity (flops, bytes); None and 0 stay as they are."""
        return x / self.device_count if x else x

    def describe(self) -> str:
        return " x ".join(f"{k}={v}" for k, v in self.axes.items()) + f" ({self.device_count} devices)"


def mesh_of(module: Any) -> MeshSpec | None:
    """The module's MESH as a MeshSpec (None for single-device references); bad MESH -> UsageError."""
    raw = getattr(module, "MESH", None)
    if raw is None:
        return None
    try:
        spec = MeshSpec.model_validate(raw)
    except ValidationError as e:  # one line per bad field, joined: a precise one-line error
        what = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'MESH'}: {err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        )
        raise UsageError(f"the reference's MESH is malformed: {what}") from None
    for s in [*spec.in_specs, spec.out_specs]:
        named = [entry for entry in s or [] if entry is not None]
        for entry in named:
            if entry not in spec.axes:
                raise UsageError(f"the reference's MESH names axis {entry!r}, not one of {list(spec.axes)}")
        if len(set(named)) < len(named):
            raise UsageError(f"the reference's MESH spec {s} names one axis twice")
    return spec


def partition_spec(entries: Spec):
    from jax.sharding import PartitionSpec

    return PartitionSpec() if entries is None else PartitionSpec(*entries)


def host_device_flag(n: int) -> str:
    return f"--xla_force_host_platform_device_count={int(n)}"


def host_threads_env(n: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The CPU client's thread pool a backend with n devices needs: `PJRT_NPROC`, at least n + 1.

    In TPU interpret mode each device blocks one thread of that pool inside an io_callback, reading a
    buffer whose host copy is queued to the same pool (a large one: 64 KiB and up, seen with jax 0.10):
    with n threads or fewer (the pool defaults to the core count) all n wait on a copy no thread is
    left to run, and the run hangs. A larger PJRT_NPROC already set is kept.
    """
    environ = os.environ if environ is None else environ
    try:
        asked = int(environ.get("PJRT_NPROC", "0"))
    except ValueError:
        asked = 0
    return {"PJRT_NPROC": str(max(int(n) + 1, asked or (os.cpu_count() or 1)))}


def request_host_devices(n: int) -> None:
    """Ask the (not yet started) CPU backend for n devices; call before any jax backend use."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*flags, host_device_flag(n)])
    os.environ.update(host_threads_env(n))


def _mesh_over(devices, spec: MeshSpec):
    """The first `spec.device_count` of `devices` as a Mesh of `spec`'s axes, in mesh order."""
    import numpy as np
    from jax.sharding import Mesh

    grid = np.array(list(devices)[: spec.device_count]).reshape(tuple(spec.axes.values()))
    return Mesh(grid, tuple(spec.axes))


def cpu_mesh(spec: MeshSpec):
    """A Mesh of `spec`'s shape over CPU devices (the backend must have been started with enough)."""
    import jax

    devices = jax.devices("cpu")
    if len(devices) < spec.device_count:
        raise UsageError(
            f"the mesh needs {spec.device_count} CPU devices but this process has {len(devices)}: "
            f"start it with XLA_FLAGS={host_device_flag(spec.device_count)}"
        )
    return _mesh_over(devices, spec)


def shape_problem(spec: MeshSpec, shapes) -> str | None:
    """Why the reference's inputs/output cannot be laid out as its MESH says (None: they can)."""
    shapes = list(shapes)
    if len(shapes) != len(spec.in_specs):
        return f"MESH has {len(spec.in_specs)} in_specs but the reference makes {len(shapes)} inputs"
    for i, (shape, entries) in enumerate(zip(shapes, spec.in_specs, strict=True)):
        if len(entries or []) > len(shape.shape):
            return f"MESH in_specs[{i}] {entries} has more entries than input {i}'s {len(shape.shape)} dims"
        for d, axis in enumerate(entries or []):
            if axis is not None and shape.shape[d] % spec.axes[axis]:
                return f"input {i} dim {d} ({shape.shape[d]}) does not split over axis {axis!r} ({spec.axes[axis]})"
    return None


def unpartitioned_kernels(closed_jaxpr) -> int:
    """pallas_calls outside every shard_map: Mosaic cannot partition them over a mesh.

    The real TPU compiler refuses them ("Mosaic kernels cannot be automatically partitioned"); the CPU
    interpreter may abort instead, so validation says so before running them.
    """
    from jax._src import core as jcore

    def count(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "pallas_call":
                n += 1
            elif name != "shard_map":
                n += sum(count(sub) for sub in jcore.jaxprs_in_params(eqn.params))
        return n

    return count(closed_jaxpr.jaxpr)


_HLO_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")


def xla_collectives(hlo_text: str) -> dict[str, int]:
    """Collectives in a compiled program's HLO: XLA moving data between devices on its own.

    A kernel's remote DMAs are not among them (on the chip they are the Mosaic custom call; in interpret
    mode, host callbacks), so any found were put there by XLA: a collective the candidate called, or a
    reshard XLA inserted because its shard_map's specs are not the MESH's (which no jaxpr shows).
    """
    import re

    found = {op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo_text)) for op in _HLO_COLLECTIVES}
    return {op: n for op, n in found.items() if n}


def xla_moves(compiled) -> str | None:
    """`xla_collectives` of a compiled program as one phrase ('all-gather x1, ...'), None if none or unreadable."""
    try:
        moved = xla_collectives(compiled.as_text())
    except Exception:  # noqa: BLE001 - no HLO text to read: the jaxpr census still spoke
        return None
    return ", ".join(f"{op} x{n}" for op, n in moved.items()) or None


def job_mesh(spec: MeshSpec, native: bool):
    """The mesh a validation child runs on: its TPU chips when native, else its CPU devices."""
    import jax

    if not native:
        return cpu_mesh(spec)
    devices = jax.devices()
    if len(devices) < spec.device_count:
        raise UsageError(f"the mesh needs {spec.device_count} devices; this host has {len(devices)}")
    return _mesh_over(devices, spec)


def topology_name(target: str, n_devices: int) -> str:
    try:
        return _TOPOLOGIES[target][n_devices]
    except KeyError:
        sizes = sorted(_TOPOLOGIES.get(target, {}))
        raise UsageError(
            f"no {n_devices}-chip topology known for {target} (known chip counts: {sizes})"
        ) from None


def topology_mesh(spec: MeshSpec, target: str):
    """A Mesh of `spec`'s shape over a libtpu compile-only topology of the target's generation."""
    from jax.experimental import topologies

    return _mesh_over(
        topologies.get_topology_desc(topology_name(target, spec.device_count), "tpu").devices, spec
    )


def input_shardings(spec: MeshSpec, mesh) -> list:
    from jax.sharding import NamedSharding

    return [NamedSharding(mesh, partition_spec(s)) for s in spec.in_specs]


def output_sharding(spec: MeshSpec, mesh):
    from jax.sharding import NamedSharding

    return NamedSharding(mesh, partition_spec(spec.out_specs))


def place(inputs, spec: MeshSpec, mesh) -> tuple:
    """Put global host arrays onto the mesh, sharded by the reference's in_specs."""
    import jax

    if len(inputs) != len(spec.in_specs):
        raise UsageError(
            f"MESH has {len(spec.in_specs)} in_specs but the reference makes {len(inputs)} inputs"
        )
    return tuple(jax.device_put(x, s) for x, s in zip(inputs, input_shardings(spec, mesh), strict=True))


def sharded_shapes(shapes, spec: MeshSpec, mesh) -> tuple:
    """ShapeDtypeStructs carrying the mesh shardings (what a topology compile traces with)."""
    import jax

    return tuple(
        jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh)
        for s, sh in zip(shapes, input_shardings(spec, mesh), strict=True)
    )


def run_on_cpu_mesh(fn, inputs, spec: MeshSpec, *, detect_races: bool = True, cores_per_device: int = 1):
    """Run `fn` on the global `inputs` sharded over a CPU mesh in TPU interpret mode (eager remote DMAs).

    Returns (output as a host numpy array, races_found). The CPU backend must have `spec.device_count`
    devices (`request_host_devices` before it starts).
    """
    import jax
    import numpy as np

    mesh = cpu_mesh(spec)
    with jax.set_mesh(mesh):
        placed = place(inputs, spec, mesh)
        with execution.tpu_interpret_mode(detect_races, cores_per_device, eager_dma=True):
            out = jax.jit(fn, out_shardings=output_sharding(spec, mesh))(*placed)
            out = jax.block_until_ready(out)
            races = bool(detect_races and execution.races_found())
    return np.asarray(out), races


def compile_for_topology(fn, shapes, spec: MeshSpec, target: str):
    """The real Mosaic compile of `fn` for a `spec.device_count`-chip topology of `target` (compile-only)."""
    import jax

    mesh = topology_mesh(spec, target)
    with jax.set_mesh(mesh):
        traced = jax.jit(fn, out_shardings=output_sharding(spec, mesh)).trace(
            *sharded_shapes(shapes, spec, mesh)
        )
        return traced.lower().compile()


def aot_args(target: Target, shapes, mesh_spec=None) -> tuple[list, contextlib.AbstractContextManager]:
    """(args, scope) to trace and compile for the target's compile-only devices, no chip needed.

    One chip by default; a reference with a MESH gets its N-chip topology (`topology_mesh`), the
    global shapes sharded by its in_specs, under `jax.set_mesh` (a candidate's shard_map needs no mesh).
    """
    import jax

    if mesh_spec is None:
        sharding = execution.aot_sharding(target)
        args = [jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding) for s in shapes]
        return args, execution.abstract_tpu_mesh(target)
    devices = topology_mesh(mesh_spec, target.name)
    return list(sharded_shapes(shapes, mesh_spec, devices)), jax.set_mesh(devices)
