"""Graph search driven by the offline model's implementer (model proposer), ranked by the static estimate."""

import json

from maxkernel.clients.cli import main


def test_beam_search_with_the_offline_model_improves_on_its_root(tmp_path, capsys):
    run = tmp_path / "run"
    # The root is the Auto loop's first kernel (same task text). A task with room above it: 12p_RMSNorm's
    # small size fits one block, already at the per-step floor, so no child there can beat its root, and
    # 20k's, 19k's and 44k's first kernels now take the blocks the search's first children would try.
    argv = [
        "search",
        "36k_Matmul_Sigmoid_Sum",
        "--algorithm",
        "beam",
        "--objective",
        "estimate",
        "--proposer",
        "model",
    ]
    argv += [
        "--model",
        "offline",
        "--max-evaluations",
        "4",
        "--run-dir",
        str(run),
        "--cache",
        str(tmp_path / "c.sqlite"),
    ]
    assert main([*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["evaluations"] == 4 and summary["cache_hits"] == 0
    assert summary["by_status"]["failed"] == 0 and summary["by_status"]["running"] == 0
    root, best = summary["root"], summary["best"]
    assert root["time_label"] == best["time_label"] == "estimate"
    assert best["time_us"] < root["time_us"] and best["speedup_vs_root"] > 1
    assert summary["reverified"]["holds"] is True
    assert (run / "search.sqlite").exists()
