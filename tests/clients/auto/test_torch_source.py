"""`auto`, `search` and `model` with a PyTorch source as --reference: ported first (cached in the run dir with its
check), then the best kernel judged against the source itself (source parity). Slow: a whole offline run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).parents[3]
ORCH = Path(sys.executable).parent / "maxkernel-orchestrate"


def _auto(reference: Path, run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ORCH), "auto", "--reference", str(reference), "--model", "offline", "--iterations", "1",
         "--run-dir", str(run_dir), "--quiet", "--json"],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip


@pytest.mark.slow
def test_auto_ports_a_pytorch_source_and_ends_with_source_parity(tmp_path):
    src = tmp_path / "row_logsumexp.py"
    shutil.copy(ROOT / "examples" / "torch" / "row_logsumexp.py", src)
    run = tmp_path / "run"
    p = _auto(src, run)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    assert summary["port"]["path"] == "torch.export" and summary["port"]["check"] == "match"
    assert summary["source_parity"]["ok"], summary["source_parity"]
    assert "matches the PyTorch source at small" in summary["source_parity"]["summary"]
    port = json.loads((run / "port.json").read_text())
    assert port["check"]["status"] == "match" and (run / "port.py").is_file()
    parity = json.loads((run / "source_parity.json").read_text())
    assert parity["ok"] and parity["reference"]["path"].endswith("row_logsumexp_port_source.py")


@pytest.mark.slow
def test_auto_with_a_source_no_path_translates_is_one_line_and_exit_2(tmp_path):
    src = tmp_path / "sorts.py"
    shutil.copy(ROOT / "tests" / "tpu_tools" / "port" / "sources" / "untranslatable.py", src)
    p = _auto(src, tmp_path / "run")
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert "no path can translate aten.sort" in p.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_source_parity_refuses_a_kernel_that_is_not_the_source(tmp_path):
    """The source reference (the port's inputs, the PyTorch source's outputs) fails a wrong candidate."""
    from maxkernel.tpu_tools.port.run import port_source

    src = tmp_path / "scaled_softmax.py"
    shutil.copy(ROOT / "examples" / "torch" / "scaled_softmax.py", src)
    r = port_source(str(src), seeds=2)
    assert r.ok and r.source_reference
    wrong = tmp_path / "wrong.py"  # softmax without the temperature
    wrong.write_text("import jax\n\n\ndef workload(x):\n    return jax.nn.softmax(x, axis=-1)\n")
    p = subprocess.run(
        [str(Path(sys.executable).parent / "maxkernel"), "validate", str(wrong), "--reference",
         r.source_reference, "--target", "cpu", "--allow-plain-jax", "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert p.returncode == 1, p.stderr[-2000:]
    assert json.loads(p.stdout)["failure"]["kind"] == "output_mismatch", p.stdout[-1500:]


def _search(reference: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ORCH), "search", "--reference", str(reference), "--model", "offline", "--run-dir", str(run_dir),
         "--cache", str(run_dir.parent / "c.sqlite"), "--quiet", *extra],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip


@pytest.mark.slow
def test_search_ports_a_pytorch_source_and_ends_with_source_parity(tmp_path):
    """The search runs over the port (two nodes, ranked by the estimate); the best kernel is then judged
    against the PyTorch source itself, and the summary and the HTML report say so."""
    src = tmp_path / "row_logsumexp.py"
    shutil.copy(ROOT / "examples" / "torch" / "row_logsumexp.py", src)
    run = tmp_path / "run"
    p = _search(src, run, "--objective", "estimate", "--max-evaluations", "2", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    assert summary["nodes"] >= 1 and summary["best"]["status"] == "valid"
    assert summary["task"]["reference"] == "references/row_logsumexp_port.py"  # the search ran on the port
    assert summary["port"]["path"] == "torch.export" and summary["port"]["check"] == "match"
    assert summary["source_parity"]["ok"], summary["source_parity"]
    assert "matches the PyTorch source at small" in summary["source_parity"]["summary"]
    port = json.loads((run / "port.json").read_text())
    assert port["check"]["status"] == "match" and (run / "port.py").is_file()
    parity = json.loads((run / "source_parity.json").read_text())
    assert parity["ok"] and parity["reference"]["path"].endswith("row_logsumexp_port_source.py")
    best = subprocess.run(
        [str(ORCH), "report", str(run), "--json"], capture_output=True, text=True, timeout=300
    )
    assert json.loads(best.stdout)["source_parity"] == summary["source_parity"]
    page = subprocess.run([str(ORCH), "report", str(run)], capture_output=True, text=True, timeout=300)
    html = Path(page.stdout.strip()).read_text()
    assert 'id="port"' in html and "torch.export" in html and "source parity: <b>pass</b>" in html


@pytest.mark.slow
def test_search_with_a_source_no_path_translates_is_one_line_exit_2_and_no_run(tmp_path):
    src = tmp_path / "sorts.py"
    shutil.copy(ROOT / "tests" / "tpu_tools" / "port" / "sources" / "untranslatable.py", src)
    p = _search(src, tmp_path / "run")
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "no path can translate aten.sort" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["sorts.py"]  # no run directory, no cache


def test_search_with_a_source_that_cannot_be_ported_is_one_line_exit_2_and_no_run(tmp_path, capsys):
    """Bad input found by the port (no inputs function): one line, exit 2, nothing left (fast: the port
    child stops before it exports anything)."""
    from maxkernel.clients.cli import main

    src = tmp_path / "no_inputs.py"
    src.write_text("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.relu(x)\n")  # fmt: skip
    rc = main(["search", "--reference", str(src), "--model", "offline", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "cannot port references/no_inputs.py" in err and "no inputs function" in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["no_inputs.py"]


@pytest.mark.slow
def test_model_ports_a_pytorch_source_and_judges_the_composed_step_against_it(tmp_path):
    """A model run over the port (its top region through one offline Auto iteration, composed back), then
    the composed step against the PyTorch source itself; the report carries both."""
    src = tmp_path / "rmsnorm_gated_mlp.py"
    shutil.copy(ROOT / "examples" / "torch" / "rmsnorm_gated_mlp.py", src)
    run = tmp_path / "run"
    p = subprocess.run(
        [str(ORCH), "model", str(src), "--top", "1", "--model", "offline", "--target", "tpu-v6e",
         "--iterations", "1", "--test-cases", "0", "--seeds", "2", "--run-dir", str(run), "--json"],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout)
    assert json.loads((run / "model_run.json").read_text())["model"].endswith("rmsnorm_gated_mlp_port.py")
    assert report["port"]["path"] == "torch.export" and report["port"]["check"] == "match"
    assert report["composed"]["ok"] and report["source_parity"]["ok"], report["source_parity"]
    assert "the composed step matches the PyTorch source at small" in report["source_parity"]["summary"]
    assert json.loads((run / "port.json").read_text())["check"]["status"] == "match"
    parity = json.loads((run / "source_parity.json").read_text())
    assert parity["ok"] and parity["kernel_path"].endswith("composed.py")
    assert "source parity: the composed step matches" in (run / "model_report.txt").read_text()


def test_model_with_a_source_that_cannot_be_ported_is_one_line_exit_2_and_no_run(tmp_path, capsys):
    from maxkernel.clients.cli import main

    src = tmp_path / "no_inputs.py"
    src.write_text("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
                   "    def forward(self, x):\n        return torch.relu(x)\n")  # fmt: skip
    rc = main(["model", str(src), "--model", "offline", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "cannot port references/no_inputs.py" in err and "no inputs function" in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["no_inputs.py"]
