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
