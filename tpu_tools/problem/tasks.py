"""One-line summaries of the JaxBench tasks, for `maxkernel tasks` and the MCP server's task list."""

from __future__ import annotations

from pydantic import BaseModel


class TaskSummary(BaseModel):
    id: str
    name: str
    model: str
    operator: str
    dtype: str | None = None
    full: dict
    small: dict
    has_pallas_reference: bool
    mesh_devices: int | None = None  # multi-chip tasks: how many devices their MESH spans


def summarize_task(task_id: str) -> TaskSummary:
    from maxkernel.jaxbench import registry

    module = registry.load_task(task_id)
    config = getattr(module, "CONFIG", {})
    sizes = getattr(module, "SIZES", {})
    return TaskSummary(
        id=task_id,
        name=str(config.get("name", task_id)),
        model=str(config.get("model", "")),
        operator=str(config.get("operator", "")),
        dtype=config.get("dtype"),
        full={k: v for k, v in sizes.get("full", {}).items()},
        small={k: v for k, v in sizes.get("small", {}).items()},
        has_pallas_reference=registry.pallas_reference_path(task_id) is not None,
        mesh_devices=_mesh_devices(module),
    )


def _mesh_devices(module) -> int | None:
    from maxkernel.tpu_tools.hardware.mesh import mesh_of

    spec = mesh_of(module)
    return spec.device_count if spec is not None else None


def list_tasks(*, multichip: bool = True) -> list[TaskSummary]:
    """The 50 single-chip tasks, then (by default) the multi-chip ones, marked by `mesh_devices`."""
    from maxkernel.jaxbench import registry

    return [summarize_task(t) for t in registry.list_task_ids(multichip=multichip)]
