"""Run in a fresh process (4 CPU devices): validate/compile the multi-chip references and adversaries.

Prints one JSON line per (task, kernel): correct, races, seconds, compile seconds. Used by
tests/jaxbench/test_multichip.py; a separate process because the device count is fixed at backend start.
"""

import json
import sys
import time
from pathlib import Path

from maxkernel.tpu_tools.hardware import hostenv, mesh

hostenv.configure()
mesh.request_host_devices(4)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from maxkernel.jaxbench.registry import load_pallas_reference, load_task  # noqa: E402
from maxkernel.tpu_tools.judged.candidate import load_candidate  # noqa: E402


def check(task_id: str, kernel: str, compile_target: str | None) -> dict:
    task = load_task(task_id)
    fn = (
        load_pallas_reference(task_id).workload
        if kernel == "pallas_reference"
        else load_candidate(kernel).workload
    )
    spec = mesh.mesh_of(task)
    inputs = task.create_inputs(size="small", key=jax.random.key(11))
    want = np.asarray(jax.jit(task.workload)(*inputs), np.float32)
    t0 = time.perf_counter()
    got, races = mesh.run_on_cpu_mesh(fn, inputs, spec)
    row = {
        "task": task_id,
        "kernel": Path(kernel).stem,
        "races": races,
        "validate_s": round(time.perf_counter() - t0, 2),
    }
    atol, rtol = task.CONFIG["atol"], task.CONFIG["rtol"]
    row["correct"] = bool(np.allclose(got.astype(np.float32), want, atol=atol, rtol=rtol))
    if compile_target:
        full = jax.eval_shape(lambda: task.create_inputs(size="full"))
        t0 = time.perf_counter()
        mesh.compile_for_topology(fn, full, spec, compile_target)
        row["compile_s"] = round(time.perf_counter() - t0, 2)
        row["topology"] = mesh.topology_name(compile_target, spec.device_count)
    return row


def estimate_row(task_id: str, target: str) -> dict:
    """The static estimate of the task's Pallas reference at full size, per device of the mesh."""
    from maxkernel.tpu_tools.cost.estimate import estimate_pallas
    from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    task, ref = load_task(task_id), load_pallas_reference(task_id)
    spec = mesh.mesh_of(task)
    m = mesh.cpu_mesh(spec)
    full = jax.eval_shape(lambda: task.create_inputs(size="full"))
    with jax.set_mesh(m):
        jaxpr = jax.make_jaxpr(ref.workload)(*mesh.sharded_shapes(full, spec, m))
    est = estimate_pallas(find_pallas_calls(jaxpr), target, program=program_cost(jaxpr))
    calls = find_pallas_calls(jaxpr)
    call = est.per_call[0]
    return {
        "task": task_id,
        "target": target,
        "remote_dmas": calls[0].remote_dmas,
        "remote_dma_bytes": calls[0].remote_dma_bytes,
        "ici_time_us": call.ici_time_us,
        "estimated_time_us": est.estimated_time_us,
        "notes": call.notes,
    }


if __name__ == "__main__":
    if sys.argv[1] == "estimate":
        for item in sys.argv[3:]:
            print(json.dumps(estimate_row(item, sys.argv[2])), flush=True)
        sys.exit(0)
    target = sys.argv[1] if sys.argv[1] != "-" else None
    for item in sys.argv[2:]:
        task_id, kernel = item.split("=", 1)
        print(json.dumps(check(task_id, kernel, target)), flush=True)
