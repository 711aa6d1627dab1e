"""Multi-chip JaxBench tasks (51m-53m): each Pallas reference validates on 4 CPU devices in TPU
interpret mode with race detection and compiles for a 4-chip topology; the ring adversaries fail.

Each case runs tests/mesh_probe.py in a fresh process: the CPU device count is fixed when the backend
starts, and a failed collective can leave the interpreter's global state unusable.
"""

import json
import subprocess
import sys

import pytest
from conftest_paths import TESTS

from maxkernel.jaxbench.registry import is_multichip, list_task_ids, load_task, resolve_id
from maxkernel.tpu_tools.hardware.mesh import mesh_of

HERE = TESTS  # mesh_probe.py and kernels/ live there
MULTICHIP = ["51m_AllGather_Matmul", "52m_Reduce_Scatter", "53m_All_To_All"]


def _probe(target: str, *items: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "mesh_probe.py"), target, *items],
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(items), proc.stderr[-3000:]
    return rows


def test_the_fifty_single_chip_tasks_stay_and_multichip_ones_are_marked():
    assert len(list_task_ids()) == 50
    assert all(not is_multichip(t) for t in list_task_ids())
    assert [t for t in list_task_ids(multichip=True) if is_multichip(t)] == MULTICHIP
    assert resolve_id("52m") == "52m_Reduce_Scatter"
    for task_id in MULTICHIP:
        spec = mesh_of(load_task(task_id))
        assert spec is not None and spec.device_count == 4


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu-v5p", "tpu-v6e"])
def test_references_validate_on_4_cpu_devices_and_compile_for_4_chips(target):
    rows = _probe(target, *(f"{t}=pallas_reference" for t in MULTICHIP))
    for row in rows:
        assert row["correct"] and not row["races"], row
        assert row["topology"] in ("v5p:2x2x1", "v6e:2x2")


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["rs_skip_wait", "rs_wrong_neighbour"])
def test_ring_adversaries_fail_and_their_honest_twin_passes(kernel):
    (bad,) = _probe("-", f"52m={HERE / 'kernels' / 'mesh' / (kernel + '.py')}")
    # The race detector is what catches them, every run. The numbers depend on when the neighbour's
    # thread copies (remote DMAs run eagerly): a skipped wait read stale data in 6/6 quiet runs, but
    # under a loaded CI box it once read the right data. The wrong neighbour is always wrong.
    assert bad["races"], bad
    if kernel == "rs_wrong_neighbour":
        assert not bad["correct"], bad
    (good,) = _probe("-", f"52m={HERE / 'kernels' / 'mesh' / 'rs_honest.py'}")
    assert good["correct"] and not good["races"], good


def test_a_mesh_backend_gets_more_client_threads_than_devices():
    """Interpret mode on N CPU devices deadlocks with N client threads or fewer (2-core hosts): PJRT_NPROC
    goes to N + 1 at least; a larger one already set stays, and job children keep it."""
    from maxkernel.tpu_tools.hardware.mesh import host_threads_env
    from maxkernel.tpu_tools.judged.job_env import minimal_env

    assert int(host_threads_env(4, {"PJRT_NPROC": "2"})["PJRT_NPROC"]) >= 5
    assert int(host_threads_env(4, {})["PJRT_NPROC"]) >= 5
    assert host_threads_env(4, {"PJRT_NPROC": "32"}) == {"PJRT_NPROC": "32"}
    assert minimal_env({"PJRT_NPROC": "5"}) == {"PJRT_NPROC": "5"}


@pytest.mark.slow  # a multi-chip compile and estimate (~15 s): make test-slow
def test_estimate_adds_ici_time_from_the_chip_table():
    from maxkernel.tpu_tools.hardware.chips import get_chip

    v5e, v4 = (_probe_estimate(t, "52m") for t in ("tpu-v5e", "tpu-v4"))
    # 3 ring steps, each a [c, N] f32 running sum: 3 x 512 x 1024 x 4 bytes, over one 50 GB/s v5e link.
    assert v5e["remote_dmas"] == 3 and v5e["remote_dma_bytes"] == 3 * 512 * 1024 * 4
    link = get_chip("tpu-v5e").ici_link_gbps
    assert v5e["ici_time_us"] == pytest.approx(v5e["remote_dma_bytes"] / (link * 1e9) * 1e6)
    assert v5e["estimated_time_us"] > v5e["ici_time_us"]
    assert v4["ici_time_us"] == 0 and any("no ICI bandwidth known" in n for n in v4["notes"])


def _probe_estimate(target: str, task_id: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "mesh_probe.py"), "estimate", target, task_id],
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert rows, proc.stderr[-3000:]
    return rows[0]
