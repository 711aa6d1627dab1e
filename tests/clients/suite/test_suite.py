"""The suite: score arithmetic on hand-made rows, a suite over scripted servers (2 workers), kill -9 and
resume, usage errors, the HTML page in headless Chromium, and one Auto suite with a scripted model over
two real in-memory servers."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest_paths import TESTS
from suite_fakes import BASELINE_US, EXPERT_US, ScriptedServer, suite_args

from maxkernel.tpu_tools.profile.scoreboard import TaskRow, reference_tier_time, score, tier_time, timed_row

HERE = TESTS  # suite_fakes.py lives there


def row(task, correct=True, tier="measured", speedup=None, expert=None, status="done") -> TaskRow:
    return TaskRow(
        task=task,
        status=status,
        correct=correct,
        tier=tier,
        speedup_vs_baseline=speedup,
        speedup_vs_expert=expert,
    )


def test_score_arithmetic_never_mixes_estimate_and_measured_rows():
    rows = [
        row("a", speedup=2.0, expert=1.0),
        row("b", speedup=0.5, expert=0.5),
        row("c", tier="estimate", speedup=4.0, expert=1.25),
        row("d", correct=False, speedup=10.0, expert=5.0),  # fast but wrong: counts nowhere
        row("e", tier=None),  # correct, never timed
    ]
    sc = score(rows)
    assert sc.correct == 4 and sc.fraction_correct == 0.8 and sc.tasks == 5
    m, e = sc.by_tier["measured"], sc.by_tier["estimate"]
    assert m.rows == 2 and m.geomean_speedup == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert e.rows == 1 and e.geomean_speedup == pytest.approx(4.0)  # not sqrt3(2 * 0.5 * 4) = 1.59
    assert m.fast_1 == pytest.approx(1 / 5) and m.fast_1_2 == pytest.approx(1 / 5)  # share of ALL tasks
    assert e.fast_1 == pytest.approx(1 / 5)
    assert [r.task for r in sc.ranked] == ["a", "b", "c"]  # measured first, each tier by speedup
    assert (sc.with_expert, sc.match_or_beat_expert, sc.beat_expert) == (3, 2, 1)
    assert "estimate" not in score([rows[0]]).by_tier


def test_speedups_only_within_one_tier_and_cpu_time_is_not_a_tpu_measurement():
    r = timed_row(
        TaskRow(task="x", status="done"), (10.0, "estimate"), (300.0, "measured"), (5.0, "estimate")
    )
    assert r.speedup_vs_baseline is None and "kernel is estimate, baseline is measured" in r.note
    assert r.speedup_vs_expert == 0.5 and r.expert_tier == "estimate"
    r = timed_row(
        TaskRow(task="x", status="done"),
        (10.0, "estimate/llo"),
        (30.0, "estimate/llo"),
        (9.0, "estimate/model"),
    )
    assert r.speedup_vs_expert is None and r.expert_tier == "estimate/model"  # the row says why: two tiers
    assert "expert is estimate/model" in r.note
    r = timed_row(TaskRow(task="x", status="done"), (10.0, "measured"), (30.0, "measured"))
    assert r.speedup_vs_baseline == 3.0 and r.tier == "measured"
    cpu_run = {
        "candidate_measured": True,
        "candidate_execution": "native",
        "measured_on": "cpu",
        "measured": {"candidate": {"median_ms": 0.3}},
        "static_estimate": {"chip": "tpu-v6e", "estimated_time_us": 12.0},
    }
    assert tier_time(cpu_run, "tpu-v6e") == (12.0, "estimate")
    llo = cpu_run | {"static_estimate": {"chip": "tpu-v6e", "estimated_time_us": 9.0, "tier": "llo"}}
    assert tier_time(llo, "tpu-v6e") == (9.0, "estimate/llo")
    r = timed_row(TaskRow(task="x", status="done"), (9.0, "estimate/llo"), (30.0, "estimate/model"))
    assert (
        r.speedup_vs_baseline is None and r.tier == "estimate" and r.estimate_tier == "llo"
    )  # two estimators
    r = timed_row(TaskRow(task="x", status="done"), (10.0, "estimate/model"), (30.0, "estimate/model"))
    assert r.speedup_vs_baseline == 3.0 and r.estimate_tier == "model"
    on_chip = cpu_run | {"measured_on": "TPU v6 lite"}
    assert tier_time(on_chip, "tpu-v6e") == (300.0, "measured")
    assert tier_time(on_chip | {"static_estimate": None}, "tpu-v5e") == (None, None)  # another chip


def test_the_baseline_is_the_reports_own_reference_in_the_kernels_tier():
    """The reference is always timed natively: a CPU time is no TPU baseline, its estimate stands in."""
    cpu_run = {
        "measured_on": "cpu",
        "measured": {"reference": {"median_ms": 0.3}, "candidate": {"median_ms": 0.1}},
        "static_estimate": {"chip": "tpu-v6e", "estimated_time_us": 12.0, "tier": "model"},
        "reference_estimate": {"chip": "tpu-v6e", "estimated_time_us": 30.0, "tier": "model"},
    }
    assert reference_tier_time(cpu_run, "tpu-v6e") == (30.0, "estimate/model")
    assert reference_tier_time(cpu_run, "tpu-v5e") == (None, None)  # estimated for another chip
    assert reference_tier_time(cpu_run | {"reference_estimate": None}, "tpu-v6e") == (None, None)
    on_chip = cpu_run | {"measured_on": "TPU v6 lite"}
    assert reference_tier_time(on_chip, "tpu-v6e") == (300.0, "measured")
    r = timed_row(
        TaskRow(task="x", status="done"),
        tier_time(cpu_run, "tpu-v6e"),
        reference_tier_time(cpu_run, "tpu-v6e"),
    )
    assert r.speedup_vs_baseline == 2.5 and r.estimate_tier == "model"


def test_suite_of_two_tasks_over_two_scripted_servers(tmp_path):
    from maxkernel.clients.suite.cli import run_suite

    a, b = ScriptedServer("w1", 0.02), ScriptedServer("w2", 0.02)
    args = suite_args(str(tmp_path / "s"), tasks="8p,12p", concurrency=2)
    out = asyncio.run(run_suite(args, servers=[a, b]))
    assert a.calls and b.calls  # both workers judged kernels
    rows = {r["task"]: r for r in out["rows"]}
    assert set(rows) == {"8p_GEMM", "12p_RMSNorm"}
    for r in rows.values():
        assert r["correct"] and r["tier"] == "estimate" and r["evaluations"] <= 6
        assert any(e.startswith("tester case") for e in r["correct_evidence"])
        assert r["baseline_time_us"] == BASELINE_US and r["expert_time_us"] == EXPERT_US
        assert r["speedup_vs_baseline"] == pytest.approx(BASELINE_US / r["kernel_time_us"], rel=1e-3)
    assert out["score"]["by_tier"]["estimate"]["rows"] == 2 and "measured" not in out["score"]["by_tier"]
    suite_dir = Path(out["suite_dir"])
    for name in ("score.json", "score.csv", "report.html", "suite.sqlite"):
        assert (suite_dir / name).is_file()
    assert (suite_dir / "tasks" / "8p_GEMM" / "search.sqlite").is_file()
    from maxkernel.tpu_tools.profile.scoreboard import read_rows  # the parser of `maxkernel bench --json` too

    assert [r.task for r in read_rows((suite_dir / "score.json").read_text())] == ["8p_GEMM", "12p_RMSNorm"]
    db = sqlite3.connect(suite_dir / "suite.sqlite")
    assert [r[0] for r in db.execute("SELECT name FROM _migrations")] == ["m001_initial"]
    assert {r[0] for r in db.execute("SELECT status FROM tasks")} == {"done"}
    assert all(r[0] for r in db.execute("SELECT best_kernel_sha256 FROM tasks"))


def test_a_server_that_dies_mid_suite_hands_its_work_to_the_other(tmp_path):
    from maxkernel.clients.suite.cli import run_suite

    a, b = ScriptedServer("dies", 0.01), ScriptedServer("stays", 0.01)
    a.die_after = 3
    out = asyncio.run(
        run_suite(suite_args(str(tmp_path / "s"), tasks="8p,12p", concurrency=2), servers=[a, b])
    )
    assert [d.split(" ")[0] for d in out["dead_servers"]] == ["dies"]
    assert all(r["status"] == "done" and r["correct"] for r in out["rows"])
    assert len(b.calls) > len(a.calls)


def test_a_kernel_right_only_on_the_loops_seeds_is_not_correct(tmp_path):
    from maxkernel.clients.suite.cli import run_suite

    out = asyncio.run(
        run_suite(suite_args(str(tmp_path / "s"), tasks="8p"), servers=[ScriptedServer(overfit=True)])
    )
    (r,) = out["rows"]
    assert not r["correct"] and r["correct_evidence"] == [] and "seed 70000" in r["note"]
    assert r["speedup_vs_baseline"] is None and out["score"]["by_tier"] == {}
    # the report says which case, at which size, how, and links the kernel and its verdicts
    assert r["failed"] == {
        "case": "seed 70000",
        "size": "small",
        "kind": "wrong_result",
        "summary": "seed 70000: 3% of elements off",
    }
    suite_dir = Path(out["suite_dir"])
    kernel, verdict = suite_dir / r["kernel_file"], suite_dir / r["verdict_file"]
    assert "pallas_call" in kernel.read_text() and r["kernel_file"].startswith("tasks/8p_GEMM/")
    assert json.loads(verdict.read_text())["evaluation"]["validation"]["failure"]["kind"] == "wrong_result"
    page = (suite_dir / "report.html").read_text()
    assert f'href="{r["kernel_file"]}"' in page and f'href="{r["verdict_file"]}"' in page
    assert "<b>seed 70000</b> at size <b>small</b>" in page and "float32[8,128]" in page
    assert r["input_shapes"] == ["float32[8,128]"] and r["check_sizes"] == ["small", "derived"]


def test_the_suite_budget_stops_new_tasks_and_resume_continues_them(tmp_path):
    from maxkernel.clients.cli import build_parser
    from maxkernel.clients.suite.cli import run_suite

    argv = [
        "suite",
        "--quiet",
        "--run-dir",
        str(tmp_path / "s"),
        "--reference",
        "8p,12p,19k",
        "--mode",
        "search",
    ]
    argv += ["--task-max-evaluations", "4", "--max-evaluations", "4", "--concurrency", "1"]
    out = asyncio.run(run_suite(build_parser().parse_args(argv), servers=[ScriptedServer()]))
    assert "--max-evaluations 4" in out["stopped"]
    assert [r["status"] for r in out["rows"]] == ["done", "pending", "pending"]
    assert out["rows"][0]["evaluations"] <= 4  # the per-task budget held too
    again = asyncio.run(run_suite(suite_args(str(tmp_path / "s"), resume=True), servers=[ScriptedServer()]))
    assert "--max-evaluations" in again["stopped"]  # the resumed suite keeps its budget


@pytest.mark.parametrize(
    "kind, correct", [("wrong_result", False), ("case_unusable", True)], ids=["fails", "unusable"]
)
def test_a_tester_case_the_kernel_fails_makes_it_incorrect_one_the_reference_cannot_run_does_not(
    tmp_path, kind, correct
):
    from maxkernel.clients.suite.cli import run_suite

    server = ScriptedServer(case_verdicts={"mixed_sign_large": kind})
    out = asyncio.run(run_suite(suite_args(str(tmp_path / "s"), tasks="8p"), servers=[server]))
    (r,) = out["rows"]
    assert r["correct"] is correct
    assert any(tool == "validate_kernel" for tool, _ in server.calls)  # the tester's cases were run
    assert r["check_sizes"][0] == "small"  # the seeds' size, then each tester case's (once each)
    if not correct:
        failed = r["failed"]
        assert (failed["case"], failed["kind"]) == ("tester case mixed_sign_large", kind)
        assert failed["size"] in r["check_sizes"] and failed["size"].startswith("small")
    else:
        assert r["failed"] is None


@pytest.mark.parametrize("weak_below", [3, 4])
def test_a_case_one_seed_cannot_tell_is_checked_on_the_seeds_that_can(tmp_path, weak_below):
    """13p's loss is one scalar: on one seed a constant passes (weak_check), on 3 the tightened check
    tells and the case is evidence; a case still weak on 3 seeds (its own i.i.d. draw: 25k's per-sample
    mean) tells nothing either way: not evidence, not a failure of a kernel the validation passed."""
    from maxkernel.clients.suite.cli import run_suite

    server = ScriptedServer(weak_below=weak_below)
    out = asyncio.run(run_suite(suite_args(str(tmp_path / "s"), tasks="8p"), servers=[server]))
    (r,) = out["rows"]
    assert r["correct"] is True and r["failed"] is None
    assert server.case_seeds and all(n in (1, 3) for n in server.case_seeds)
    assert server.case_seeds.count(3) == server.case_seeds.count(1)  # each case: one seed, then three
    told_nothing = [e for e in r["correct_evidence"] if "told nothing" in e]
    cases = [e for e in r["correct_evidence"] if e.startswith("tester case")]
    assert cases and (told_nothing == cases if weak_below == 4 else not told_nothing)


def test_a_weak_case_does_not_rescue_a_failing_one(tmp_path):
    """A case that told nothing beside one that failed: the row is not correct, named by the failing case."""
    from maxkernel.clients.suite.cli import run_suite

    server = ScriptedServer(weak_below=4, case_verdicts={"mixed_sign_large": "wrong_result"})
    out = asyncio.run(run_suite(suite_args(str(tmp_path / "s"), tasks="8p"), servers=[server]))
    (r,) = out["rows"]
    assert r["correct"] is False and r["correct_evidence"] == []
    assert (r["failed"]["case"], r["failed"]["kind"]) == ("tester case mixed_sign_large", "wrong_result")


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_suite_killed_with_sigkill_resumes_without_repeating_a_finished_task(tmp_path):
    from maxkernel.clients.suite.cli import run_suite

    suite_dir = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, str(HERE / "suite_fakes.py"), str(suite_dir), "--delay", "0.25"],
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    done: list[str] = []
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.2)
        if (suite_dir / "suite.sqlite").is_file():
            try:
                with sqlite3.connect(suite_dir / "suite.sqlite", timeout=30) as db:
                    done = [r[0] for r in db.execute("SELECT task FROM tasks WHERE status='done'")]
            except sqlite3.OperationalError:  # the file exists a moment before its first migration
                continue
            if done:
                break
    assert done and child.poll() is None, "the child finished before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with sqlite3.connect(suite_dir / "suite.sqlite") as db:
        before = dict(db.execute("SELECT task, finished_at FROM tasks WHERE status='done'").fetchall())
    server = ScriptedServer("after")
    out = asyncio.run(run_suite(suite_args(str(suite_dir), resume=True), servers=[server]))
    assert {r["status"] for r in out["rows"]} == {"done"} and len(out["rows"]) == 3
    with sqlite3.connect(suite_dir / "suite.sqlite") as db:
        after = dict(db.execute("SELECT task, finished_at FROM tasks").fetchall())
        attempts = dict(db.execute("SELECT task, attempts FROM tasks").fetchall())
    for task, finished_at in before.items():
        assert after[task] == finished_at and attempts[task] == 1  # kept, not run again
        assert all(ref != task for _, ref in server.calls)  # the new server never saw it
    assert out["requeued_on_start"] <= 1  # at most the one task in flight when killed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--reference", "99x"], "unknown JaxBench task '99x'"),
        (["--reference", "8p", "--target", "tpu-v9"], "unknown --target 'tpu-v9'"),
        (["--reference", "8p", "--concurrency", "0"], "--concurrency should be at least 1"),
        (["--reference", "8p", "--max-usd", "-1"], "--max-usd should be >= 0"),
        (["--resume", "/nonexistent/suite"], "not a suite directory to resume"),
    ],
)
def test_usage_errors_exit_2_with_one_line_and_nothing_on_disk(argv, message, capsys, tmp_path):
    from maxkernel.clients import cli

    run_dir = tmp_path / "s"
    assert cli.main(["suite", *argv, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("maxkernel-orchestrate suite: ") and "\n" not in err
    assert not run_dir.exists()


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no chromium")
def test_score_page_renders_in_headless_chromium(tmp_path):
    from maxkernel.clients.suite.report import write_all
    from maxkernel.tpu_tools.profile.scoreboard import FailedCase

    rows = [
        row("8p", speedup=2.0, expert=1.1),
        row("12p", tier="estimate", speedup=0.7),
        row("9p", correct=False),
    ]
    rows[1].estimate_tier, rows[1].size, rows[1].check_sizes = "llo", "full", ["small", "small x2"]
    rows[1].input_shapes, rows[1].output_shapes = ["bfloat16[4096,8192]"], ["bfloat16[4096,8192]"]
    bad = rows[2]
    bad.size, bad.kernel_file, bad.verdict_file = (
        "small",
        "tasks/9p/scored_kernel.py",
        "tasks/9p/scored_verdict.json",
    )
    bad.failed = FailedCase(
        case="tester case ragged_k", size="small (k=136)", kind="wrong_result", summary="4% off"
    )
    (tmp_path / "tasks" / "9p").mkdir(parents=True)
    (tmp_path / bad.kernel_file).write_text("# kernel")
    (tmp_path / bad.verdict_file).write_text("{}")
    paths = write_all(tmp_path, rows, score(rows), {"suite_dir": "demo"})
    page = Path(paths["html"])
    text = page.read_text()
    assert text.count("<svg") == 3 and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "estimate/llo" in text and "bfloat16[4096,8192]" in text and "small x2" in text
    assert "<b>tester case ragged_k</b> at size <b>small (k=136)</b>" in text and "wrong_result" in text
    for link in (bad.kernel_file, bad.verdict_file):  # relative, and there
        assert f'href="{link}"' in text and (page.parent / link).is_file()
    saved = json.loads(Path(paths["json"]).read_text())["rows"][2]
    assert saved["failed"]["case"] == "tester case ragged_k" and saved["kernel_file"] == bad.kernel_file
    png = tmp_path / "out.png"
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--screenshot={png}",
            "--window-size=1200,900",
            page.as_uri(),
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses to a few KB


@pytest.mark.slow
def test_auto_suite_with_a_scripted_model_over_two_real_servers(tmp_path, monkeypatch):
    """Real verdicts: each task's kernel (its expert reference, as the scripted implementer's code) is
    compiled for tpu-v6e, validated in interpret mode, tested on the tester's case, profiled, then
    re-verified on fresh seeds, all through two in-memory servers sharing one worker pool."""
    from maxkernel.clients import cli
    from maxkernel.clients.models import FunctionModel
    from maxkernel.clients.models import registry as model_registry
    from maxkernel.clients.suite.cli import run_suite
    from maxkernel.jaxbench import registry
    from maxkernel.server.app import build_server
    from maxkernel.tpu_tools.pool.workers import WorkerPool
    from tests.clients.auto.test_loop import ANALYSIS, PLAN, code, role_of
    from tests.clients.auto.test_roles import BIG, cases

    kernels = {t: registry.pallas_reference_path(t).read_text() for t in ("12p_RMSNorm", "41k_Gemm_Add_ReLU")}
    names = {"12p_RMSNorm": "rmsnorm", "41k_Gemm_Add_ReLU": "76_gemm_add_relu"}
    asked: list[str] = []

    def reply(messages, settings) -> str:
        role = role_of(messages)
        asked.append(role)
        if role == "implementer":
            text = messages[-1].text.lower()
            task = next(t for t, n in names.items() if n in text)
            return code(kernels[task])
        return {"planner": PLAN, "profile_analyst": ANALYSIS, "tester": cases(BIG)}[role]

    monkeypatch.setattr(model_registry, "build_model", lambda spec: FunctionModel(reply, name="scripted"))
    argv = [
        "suite",
        "--reference",
        "12p,41k",
        "--run-dir",
        str(tmp_path / "s"),
        "--quiet",
        "--concurrency",
        "2",
    ]
    argv += ["--test-cases", "1", "--seeds", "1", "--verify-seeds", "2", "--check-size", "small"]
    args = cli.build_parser().parse_args(argv)
    with WorkerPool(max_workers=2) as pool:
        servers = [build_server(tmp_path / f"ws{i}", pool=pool) for i in (1, 2)]
        out = asyncio.run(run_suite(args, servers=servers))
    assert {r["task"] for r in out["rows"]} == {"12p_RMSNorm", "41k_Gemm_Add_ReLU"}
    for r in out["rows"]:
        assert r["status"] == "done" and r["correct"], r
        assert r["size"] == "full"  # the default: scored at the production size, validated at the check sizes
        assert r["check_sizes"] == ["small"], r  # --check-size small reached every validation
        assert any("fresh seeds" in e for e in r["correct_evidence"])
        assert any("tester case big_values" in e for e in r["correct_evidence"])
        # the kernel IS the expert reference: the same tier, the same estimate, ratio 1
        assert r["tier"] == "estimate" and r["speedup_vs_expert"] == pytest.approx(1.0, rel=0.02)
        assert r["speedup_vs_baseline"] and r["baseline_time_us"], r["note"]
    assert asked.count("implementer") == 2 and asked.count("tester") == 2


def test_no_reachable_server_is_one_line_exit_1_and_nothing_on_disk(tmp_path, capsys):
    from maxkernel.clients import cli

    run_dir = tmp_path / "s"
    argv = ["suite", "--reference", "12p", "--server", "http://127.0.0.1:9/mcp", "--run-dir", str(run_dir)]
    assert cli.main([*argv, "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("maxkernel-orchestrate suite: no server reachable: http://127.0.0.1:9/mcp")
    assert "\n" not in err and not run_dir.exists()
