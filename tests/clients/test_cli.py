"""`maxkernel-orchestrate`: usage errors exit 2 with one line; one real run over a stdio server."""

from __future__ import annotations

import json

import pytest
from conftest_paths import PLUS_ONE_REF

from maxkernel.clients import cli
from maxkernel.clients.models import registry
from tests.clients.auto.test_loop import PLAN, PLUS_ONE, Script, code


@pytest.mark.parametrize(
    "argv, message",
    [
        (["auto"], "give the reference: --reference ID|PATH"),
        (["auto", "--task", "12p", "--reference", "x.py"], "the reference is given twice"),
        (["auto", "--reference", "/nonexistent/ref.py"], "reference file not found"),
        (["auto", "--task", "99p_Nope"], "unknown JaxBench task '99p_Nope'"),
        (["auto", "--reference", "12p_RMSNorm", "--target", "tpu-v9"], "unknown target 'tpu-v9'"),
        (["auto", "--task", "12p_RMSNorm", "--iterations", "0"], "--iterations should be at least 1"),
        (["auto", "--resume", "/nonexistent/run"], "not a run directory to resume"),
        (["auto", "--task", "12p_RMSNorm", "--model", "nonsense", "--quiet"], "unknown model 'nonsense'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, message, capsys, tmp_path):
    assert cli.main([*argv, "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("maxkernel-orchestrate: ") and "\n" not in err
    assert not list(tmp_path.iterdir())  # nothing created on disk


@pytest.mark.slow
def test_auto_over_stdio_with_a_scripted_model(monkeypatch, capsys, tmp_path):
    script = Script(planner=[PLAN], implementer=[code(PLUS_ONE)])
    monkeypatch.setattr(registry, "build_model", lambda spec: script.model)
    argv = ["auto", "--reference", PLUS_ONE_REF, "--target", "cpu", "--iterations", "1", "--no-profile"]
    argv += ["--test-cases", "0"]
    code_ = cli.main(
        [*argv, "--model", "offline", "--out", str(tmp_path), "--json", "--quiet", "--seeds", "1"]
    )
    out = capsys.readouterr().out
    summary = json.loads(out)
    assert code_ == 0, summary
    assert summary["best"]["iteration"] == 1 and summary["best"]["time_basis"] == "none"
    assert script.asked == ["planner", "implementer"]
    run_dir = tmp_path / summary["run_dir"].rsplit("/", 1)[-1]
    assert (run_dir / "best_kernel.py").read_text() == PLUS_ONE
    assert (run_dir / "workspace" / "references" / "plus_one_reference.py").is_file()
