"""`auto --reference SOURCE.py` with a PyTorch source: ported first (cached in the run dir with its check),
then the best kernel judged against the source itself (source parity). Slow: a whole offline Auto loop."""

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


def test_search_refuses_a_pytorch_source_in_one_line(capsys):
    """search has no port step: a PyTorch source is a usage error that says what to do (fast, no torch)."""
    from maxkernel.clients.cli import main

    rc = main(
        ["search", "--reference", str(ROOT / "examples" / "torch" / "row_logsumexp.py"), "--model", "offline"]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "is a PyTorch source: port it first (maxkernel port" in err
