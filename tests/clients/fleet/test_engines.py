"""The fleet without a cluster: placement by resources, the engine flags' usage errors, the fleet view,
results that arrive twice written once, and the host named in every verdict. (No Ray process starts
here: a Ray cluster only ever starts inside a private namespace, in test_ray_fleet.py.)"""

from __future__ import annotations

import pytest

from maxkernel.clients.fleet.engine import FleetView, hosts_in
from maxkernel.clients.fleet.placement import NoHostFor, Placement, chip_resource, place, profiled_chip

V4_FLEET = {"CPU": 2.0, "accelerator_type:TPU-V4": 2.0, "node:127.0.0.1": 3.0}
V6E_FLEET = {"CPU": 9.0, "accelerator_type:TPU-V6E": 1.0}


def test_compile_validate_and_estimate_run_on_any_host():
    for tool, args in [
        ("compile_kernel", {"target": "tpu-v6e"}),
        ("validate_kernel", {"target": "cpu"}),
        ("estimate_kernel", {"target": "tpu-v6e"}),
        ("evaluate_kernel", {"profile_target": "tpu-v6e", "profile": False}),
        ("evaluate_kernel", {"profile_target": "cpu"}),
    ]:
        assert place(tool, args, "chip", V4_FLEET) == Placement(), tool
        assert Placement().options() == {"num_cpus": 1, "max_retries": 3, "retry_exceptions": False}


def test_profiling_on_a_chip_goes_to_a_host_with_that_chip_kind():
    p = place("evaluate_kernel", {"profile_target": "tpu-v6e"}, "auto", V6E_FLEET)
    assert p.on_chip == "tpu-v6e" and p.options()["resources"] == {"accelerator_type:TPU-V6E": 1}
    assert place("profile_kernel", {"target": "tpu-v5e"}, "auto", {"accelerator_type:TPU-V5LITEPOD": 1})
    # any: never waits for a chip (off the chip a Pallas kernel gets a labeled estimate)
    assert place("profile_kernel", {"target": "tpu-v6e"}, "any", V6E_FLEET) == Placement()
    assert profiled_chip("profile_kernel", {"target": "local"}) is None
    assert chip_resource("tpu-7x") == "accelerator_type:TPU-V7X"


def test_a_chip_kind_no_host_has_fails_at_once_with_one_line_unless_auto():
    with pytest.raises(NoHostFor) as e:
        place("evaluate_kernel", {"profile_target": "tpu-v6e"}, "chip", V4_FLEET)
    msg = str(e.value)
    assert "\n" not in msg
    assert "no host in the Ray cluster has a tpu-v6e chip" in msg and "accelerator_type:TPU-V6E" in msg
    assert "chip kinds present: TPU-V4" in msg
    assert place("evaluate_kernel", {"profile_target": "tpu-v6e"}, "auto", V4_FLEET) == Placement()


def test_the_fleet_view_and_the_hosts_named_by_a_report():
    assert FleetView(engine="ray", hosts_up=2, hosts_busy=1).line() == "ray: 2 hosts up, 1 busy"
    assert FleetView(engine="ray", hosts_up=1, hosts_lost=["h2"]).line() == "ray: 1 hosts up, ? busy, 1 lost"
    report = {
        "compile": {"environment": {"host": "host-1", "sandbox": {"tier": "bwrap"}}},
        "validation": {"environment": {"host": "host-2"}},
        "cases": [{"environment": {"host": "host-1"}}],
        "profile": None,
    }
    assert hosts_in(report) == {"host-1", "host-2"}


async def _dispatcher_fleet():
    from maxkernel.clients.fleet.servers import Dispatcher
    from maxkernel.clients.search.evaluator import EvaluatorDown

    class Dead:
        name = "http://b/mcp"

        async def tool_versions(self):
            return "x"

        async def evaluate(self, *a, **k):
            raise EvaluatorDown("connection refused")

    class Alive(Dead):
        name = "http://a/mcp"

        async def evaluate(self, *a, **k):
            return "verdict"

    d = Dispatcher([Dead(), Alive()], 2)
    assert d.fleet().hosts_up == 2
    assert await d.evaluate("src", None) == "verdict"  # the dead one's work moved
    return d.fleet()


def test_the_server_engine_reports_its_fleet_and_the_server_it_lost():
    import asyncio

    view = asyncio.run(_dispatcher_fleet())
    assert view.engine == "servers" and view.hosts_up == 1 and view.hosts_busy == 0
    assert view.hosts_lost == ["http://b/mcp (connection refused)"]


def test_a_result_arriving_twice_is_written_once(tmp_path):
    from maxkernel.clients.search.graph import NodeVerdict
    from maxkernel.clients.search.store import EvalCache
    from maxkernel.clients.suite.store import SuiteStore
    from maxkernel.tpu_tools.profile.scoreboard import TaskRow

    cache = EvalCache(tmp_path / "c.sqlite")
    first = NodeVerdict(status="valid", time_us=5.0, time_label="estimate", server="host-1")
    cache.put("k", ("a", "b", "c", "d", "e"), first)
    cache.put("k", ("a", "b", "c", "d", "e"), first.model_copy(update={"server": "host-2", "time_us": 6.0}))
    assert cache.get("k").server == "host-1" and len(cache) == 1
    store = SuiteStore(tmp_path / "s")
    store.add_tasks(["8p_GEMM"])
    store.start("8p_GEMM")
    store.finish(TaskRow(task="8p_GEMM", status="done", correct=True, hosts=["host-1"]), {})
    store.finish(TaskRow(task="8p_GEMM", status="done", correct=False, hosts=["host-2"]), {})
    assert store.rows()[0].hosts == ["host-1"] and store.rows()[0].correct
    assert [e["kind"] for e in store.events()].count("finished") == 1


def test_every_verdict_names_the_host_that_judged_it(monkeypatch):
    from maxkernel.tpu_tools.judge.outcomes import stamp_sandbox
    from maxkernel.tpu_tools.pool.jobs import JobOutcome
    from maxkernel.tpu_tools.pool.sandbox import SandboxInfo
    from maxkernel.tpu_tools.reports import CompileReport

    monkeypatch.setenv("MAXKERNEL_HOST", "tpu-vm-7")
    report = CompileReport(ok=True, target="tpu-v6e", size="small", kernel_path="k.py")
    out = JobOutcome(status="ok", message="", sandbox=SandboxInfo(tier="bwrap"))
    env = stamp_sandbox(report, out).environment
    assert env.host == "tpu-vm-7" and env.sandbox.tier == "bwrap"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["suite", "--reference", "8p", "--engine", "ray", "--server", "http://a:1/mcp"], "not both"),
        (["suite", "--reference", "8p", "--ray-address", "10.0.0.1:6379"], "go with --engine ray"),
        (["search", "--reference", "8p", "--profile-on", "chip"], "go with --engine ray"),
        (["search", "--reference", "8p", "--engine", "ray", "--server", "http://a:1/mcp"], "not both"),
        (["search", "--engine", "ray", "--reference", "REF_FILE"], "JaxBench task id"),
    ],
)
def test_engine_flags_that_disagree_are_one_line_exit_2_and_nothing_on_disk(argv, message, capsys, tmp_path):
    from maxkernel.clients import cli

    run_dir = tmp_path / "run"
    ref = tmp_path / "ref.py"
    ref.write_text("CONFIG = {}\n")
    argv = [str(ref) if a == "REF_FILE" else a for a in argv]
    assert cli.main([*argv, "--run-dir", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith(f"maxkernel-orchestrate {argv[0]}: ") and "\n" not in err, err
    assert not run_dir.exists()


def test_the_suite_live_line_shows_hosts_up_and_busy():
    from maxkernel.clients.suite.runner import SuiteProgress

    class Fleet:
        def fleet(self):
            return FleetView(engine="ray", hosts_up=2, hosts_busy=1, hosts_lost=["host-2"])

    line = SuiteProgress(3, 1, 1, enabled=False)
    assert "|" not in line.line().split("ETA")[1]  # no engine yet: no fleet part
    line.engine = Fleet()
    assert line.line() == "1/3 done | correct 1 | ETA ? | ray: 2 hosts up, 1 busy, 1 lost"


# Ray's ConnectionError when ray.init(address="auto") finds no cluster on the machine (ray/_private/services.py)
RAY_NO_CLUSTER = (
    "Could not find any running Ray instance. Please specify the one to connect to by setting `--address` "
    "flag or `RAY_ADDRESS` environment variable."
)


def test_no_cluster_and_no_address_names_the_one_box_recipe_with_the_command():
    from maxkernel.clients.fleet.ray_engine import NoRayCluster, RayUnavailable, connect_error

    command = "maxkernel-orchestrate suite --engine ray --reference 12p"
    e = connect_error("auto", ConnectionError(RAY_NO_CLUSTER), command)
    assert isinstance(e, NoRayCluster) and "\n" not in str(e)
    assert f"python -m maxkernel.clients.fleet.local_cluster --unshare --workers 2 -- {command}" in str(e)
    assert "--ray-address" in str(e) and "A fleet on Ray" in str(e)
    # a cluster that was named but cannot be reached is not the caller's mistake: exit 1, Ray's own words
    e = connect_error("10.0.0.1:6379", ConnectionError("Failed to connect to GCS at 10.0.0.1:6379"))
    assert type(e) is RayUnavailable and str(e).endswith(
        "at 10.0.0.1:6379: Failed to connect to GCS at 10.0.0.1:6379"
    )


@pytest.mark.parametrize("verb", ["suite", "search"])
def test_engine_ray_with_no_cluster_is_one_line_exit_2_naming_the_recipe(verb, tmp_path):
    """The real ray.init(address="auto"), in a private PID and network namespace (no Ray process of another
    test is visible, none can bind a real interface) and with a fresh Ray temp dir (no stale cluster file):
    it starts nothing, fails at once, and the CLI says what to run instead."""
    import os
    import shutil
    import subprocess
    import sys

    pytest.importorskip("ray")
    from maxkernel.clients.fleet.local_cluster import UNSHARE

    if shutil.which("unshare") is None or subprocess.run([*UNSHARE, "true"], capture_output=True).returncode:
        pytest.skip("needs a private network + PID namespace (unshare) so no other Ray cluster is visible")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path / "ray")}
    (tmp_path / "ray").mkdir()
    argv = [verb, "--engine", "ray", "--reference", "12p", "--run-dir", str(tmp_path / "run"), "--quiet"]
    code = "import sys; from maxkernel.clients.cli import main; sys.argv[0] = 'maxkernel-orchestrate'; sys.exit(main())"
    p = subprocess.run(
        [*UNSHARE, sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120
    )
    err = p.stderr.strip()
    assert p.returncode == 2, (p.returncode, err)
    assert "\n" not in err and err.startswith(
        f"maxkernel-orchestrate {verb}: --engine ray found no Ray cluster"
    )
    assert f"local_cluster --unshare --workers 2 -- maxkernel-orchestrate {verb} --engine ray" in err, err
    assert not (tmp_path / "run").exists()
