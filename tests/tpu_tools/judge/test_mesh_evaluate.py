"""Kernels over a mesh through the product: the Evaluator's pool, the CLI's report and the MCP tools.

The reference's MESH reaches every job: validation runs the candidate on 4 CPU devices (the pool
starts that child's backend with them) in TPU interpret mode with race detection, compile targets a
4-chip topology on the real Mosaic compiler, and the verdicts say how many devices they ran on.
"""

from __future__ import annotations

import pytest
from conftest_paths import KERNELS
from mcp import Client

from maxkernel.jaxbench.registry import pallas_reference_path
from maxkernel.server.app import build_server
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

MESH_KERNELS = KERNELS / "mesh"


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(max_workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def evaluator(pool):
    return Evaluator(pool)


def _validate(evaluator, kernel, task="52m", **kw):
    return evaluator.validate(str(kernel), task, "tpu-v6e", seeds=kw.pop("seeds", 1), **kw)


def test_the_reference_validates_on_four_cpu_devices_and_the_verdict_says_so(evaluator):
    r = _validate(evaluator, pallas_reference_path("52m_Reduce_Scatter"), seeds=2)
    assert r.ok, r.failure
    assert r.devices == 4 and r.reference.mesh.device_count == 4
    assert "over a mesh x=4 (4 devices)" in r.execution and "race detection on" in r.execution
    assert not r.races_found and len(r.run_order) == 4


@pytest.mark.parametrize("target", ["tpu-v6e", "cpu"])
@pytest.mark.parametrize("kernel", ["rs_skip_wait", "rs_wrong_neighbour"])
def test_a_ring_that_skips_a_wait_or_sends_to_the_wrong_neighbour_fails(evaluator, kernel, target):
    """On the cpu target too: a mesh kernel's races are checked wherever it is interpreted."""
    r = evaluator.validate(str(MESH_KERNELS / f"{kernel}.py"), "52m", target, seeds=1)
    assert not r.ok and r.failure.kind in ("race", "output_mismatch"), r.failure
    assert r.devices == 4 and "race detection on" in r.execution


def test_a_kernel_outside_shard_map_is_refused_before_it_runs(evaluator):
    r = _validate(evaluator, MESH_KERNELS / "rs_unsharded.py")
    assert not r.ok and r.failure.kind == "compile_error"
    assert "cannot be automatically partitioned" in r.failure.summary and r.devices == 4


def test_a_reshard_xla_inserts_is_work_outside_the_kernel_though_no_jaxpr_shows_it(evaluator):
    """in_specs P() on row-sharded inputs: XLA all-gathers them (its partitioner, not a primitive)."""
    r = _validate(evaluator, MESH_KERNELS / "rs_replicated.py")
    assert not r.ok and r.failure.kind == "work_outside_kernel" and r.failure.stage == "compile"
    assert "all-gather" in r.failure.summary
    c = evaluator.compile(str(MESH_KERNELS / "rs_replicated.py"), "52m", "tpu-v6e")
    assert c.ok and any("all-gather" in w and "validate will refuse" in w for w in c.warnings)


def test_blanking_the_hlo_to_hide_the_reshard_is_tampering(evaluator):
    r = _validate(evaluator, MESH_KERNELS / "rs_hides_hlo.py")
    assert not r.ok and r.failure.kind == "tampered" and "Compiled.as_text" in r.failure.summary


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_xla_collectives_doing_the_communication_are_work_outside_the_kernel(evaluator):
    r = _validate(evaluator, MESH_KERNELS / "rs_xla_collective.py")
    assert not r.ok and r.failure.kind == "work_outside_kernel"
    assert "reduce_scatter" in r.failure.summary
    # a JAX rewrite the caller asked to accept: the collective is right, so it passes
    r = _validate(evaluator, MESH_KERNELS / "rs_xla_collective.py", allow_plain_jax=True)
    assert r.ok, r.failure


def test_compile_targets_a_four_chip_topology_and_refuses_an_unpartitionable_kernel(evaluator):
    r = evaluator.compile(str(pallas_reference_path("51m_AllGather_Matmul")), "51m", "tpu-v5p")
    assert r.ok, r.failure
    assert (r.devices, r.topology, r.compiler) == (4, "v5p:2x2x1", "mosaic-tpu-aot")
    assert "v5p:2x2x1 topology" in r.compiler_note and "interpret" not in r.compiler_note
    bad = evaluator.compile(str(MESH_KERNELS / "rs_unsharded.py"), "52m", "tpu-v6e")
    assert not bad.ok and "cannot be automatically partitioned" in bad.failure.summary


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_the_mcp_tools_pass_the_mesh_through(tmp_path, pool):
    source = pallas_reference_path("53m_All_To_All").read_text()
    async with Client(build_server(tmp_path / "ws", pool=pool), raise_exceptions=True) as c:
        r = await c.call_tool(
            "validate_kernel",
            {"reference": "53m", "kernel_source": source, "target": "tpu-v6e", "seeds": 1},
        )
        rep = r.structured_content
        assert rep["ok"], rep.get("failure")
        assert rep["devices"] == 4 and rep["reference"]["mesh"]["axes"] == {"x": 4}
        r = await c.call_tool(
            "compile_kernel", {"reference": "53m", "kernel_source": source, "target": "tpu-v6e"}
        )
        rep = r.structured_content
        assert rep["ok"] and rep["topology"] == "v6e:2x2" and rep["devices"] == 4
        # the search's and the suite's one call: compile, validate and profile, each over the mesh
        r = await c.call_tool(
            "evaluate_kernel",
            {"reference": "53m", "kernel_source": source, "compile_target": "tpu-v6e", "seeds": 1},
        )
        rep = r.structured_content
        assert rep["ok"], rep
        assert rep["compile"]["devices"] == rep["validation"]["devices"] == 4
        assert rep["profile"]["static_estimate"] and rep["profile"]["reference_estimate"]


def test_estimate_and_analyze_trace_over_the_topology_and_cost_one_chip(evaluator):
    """Per chip: the reference's flops split over the mesh, plus the ring's ICI time, tier llo here."""
    kernel = str(pallas_reference_path("52m_Reduce_Scatter"))
    v5e = evaluator.estimate(kernel, "52m", "tpu-v5e", "full")
    assert v5e.ok, v5e.failure
    est = v5e.estimate
    assert est.flops == pytest.approx(3 * 4 * 512 * 1024 / 4)  # get_flops / 4 chips
    (call,) = est.per_call
    assert call.ici_time_us > 0 and est.estimated_time_us > call.ici_time_us
    v5p = evaluator.estimate(kernel, "52m", "tpu-v5p", "full").estimate
    assert v5p.per_call[0].ici_time_us == pytest.approx(call.ici_time_us / 2)  # 100 vs 50 GB/s links


def test_profile_estimates_a_mesh_kernel_per_chip_and_never_runs_it_off_the_chip(evaluator):
    kernel = str(pallas_reference_path("52m_Reduce_Scatter"))
    r = evaluator.profile(kernel, "52m", "tpu-v5e", measure_interpret=True, reps=3)
    assert r.ok, r.failure
    assert not r.candidate_measured and "TPU slice" in r.candidate_not_measured_reason
    assert r.static_estimate is not None and r.reference_estimate is not None
    assert any("over 4 chips" in a for a in r.reference_estimate.assumptions)


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_the_search_evaluator_ranks_a_ring_kernel_and_rejects_its_racy_twin(tmp_path, pool):
    """Graph search's one call (evaluate_kernel over MCP): the mesh rides along with the reference."""
    import asyncio

    from maxkernel.clients.search.evaluator import EvalTask
    from maxkernel.clients.search.remote import MCPEvaluator

    honest = pallas_reference_path("52m_Reduce_Scatter").read_text()
    # the skip-wait ring as one self-contained source (a search proposes text, not a folder)
    racy = (MESH_KERNELS / "_ring.py").read_text() + (
        "\n\ndef workload(partials):\n    return reduce_scatter(partials, defect='skip_wait')\n"
    )
    task = EvalTask(reference="52m", seeds=1, profile_target="tpu-v5e")

    async def go():
        async with MCPEvaluator(build_server(tmp_path, pool=pool), name="mem") as ev:
            return [await ev.evaluate(src, task) for src in (honest, racy)]

    good, bad = asyncio.run(go())
    assert good.status == "valid", good.failure
    assert good.validation["devices"] == 4 and good.time_label == "estimate" and good.time_us > 0
    assert bad.status == "invalid"


_MESH_REF = """
import jax
import jax.numpy as jnp

SIZES = {"small": {"n": 8}}
MESH = MESH_VALUE


def create_inputs(dtype=None, *, key=None, size="small"):
    return (jnp.ones((SIZES[size]["n"], 128), jnp.float32),)


def workload(x):
    return x * 2.0
"""


@pytest.mark.parametrize(
    ("mesh", "why"),
    [
        ({"axes": {"x": 4}, "in_specs": [["y", None]], "out_specs": None}, "names axis 'y'"),
        ({"axes": {"x": 4}, "in_specs": [["x", "x"]], "out_specs": None}, "names one axis twice"),
        ({"axes": {"x": 4}, "in_specs": [], "out_specs": None}, "0 in_specs but the reference makes 1"),
        ({"axes": {"x": 3}, "in_specs": [["x", None]], "out_specs": None}, "does not split over axis 'x'"),
        ({"axes": {"x": 128}, "in_specs": [["x", None]], "out_specs": None}, "at most 64"),
    ],
)
def test_a_malformed_mesh_is_the_references_error_with_one_precise_line(evaluator, tmp_path, mesh, why):
    ref = tmp_path / "mesh_ref.py"
    ref.write_text(_MESH_REF.replace("MESH_VALUE", repr(mesh)))
    kernel = tmp_path / "k.py"
    kernel.write_text("def workload(x):\n    return x * 2.0\n")
    r = evaluator.validate(str(kernel), str(ref), "tpu-v6e", seeds=1)
    assert not r.ok and r.failure.kind in ("reference_error", "usage_error"), r.failure
    assert why in r.failure.summary and "\n" not in r.failure.summary


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_on_a_tpu_host_mesh_jobs_stay_off_the_device_lane():
    """The device worker owns the chips and has one backend; a mesh kernel's jobs need N CPU devices,
    so on a device-owning host they run as forked children (which never open the chips)."""
    kernel = str(pallas_reference_path("52m_Reduce_Scatter"))
    with WorkerPool(max_workers=1, device_owner=True) as pool:
        ev = Evaluator(pool)
        r = ev.validate(kernel, "52m", "tpu-v6e", seeds=1)
        assert r.ok and r.devices == 4, r.failure
        c = ev.compile(kernel, "52m", "tpu-v6e")
        assert c.ok and c.topology == "v6e:2x2", c.failure
        p = ev.profile(kernel, "52m", "tpu-v6e", reps=3)
        assert p.ok and p.static_estimate is not None, p.failure
