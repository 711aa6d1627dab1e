"""A fresh clone in a `mktemp -d` under /tmp, installed there, evaluates as it does anywhere else.

Each job gets a private /tmp: before the sandbox bound the runtime back (`sandbox.runtime_paths`), every
module the forkserver had not imported yet failed to load in a job (`internal_error: ImportError`). The
clone gets its own small venv in the clone: no packages of its own, the current venv's site-packages
through a .pth, and an editable install of the clone (so `maxkernel.*` is imported from /tmp). Uncommitted
and untracked (not ignored) files are copied over the clone, so the test runs the tree under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from conftest_paths import ROOT

from maxkernel.tpu_tools.pool import sandbox

pytestmark = pytest.mark.slow  # a clone, an editable install and a pool started from it: ~30 s per tier

CHECK = r"""
import json, os, sys
sys.path.insert(0, os.path.abspath("tests"))  # pool_jobs, as pytest's pythonpath would
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import JobSpec, WorkerPool

out = {"package": __import__("maxkernel.tpu_tools.pool.sandbox", fromlist=["x"]).__file__}
here = os.getcwd().lstrip("/")
with WorkerPool(max_workers=1) as pool:
    hidden = (os.path.abspath("examples/matmul_reference.py"), os.path.abspath("jaxbench/tasks"))
    names = [f"{here}/examples/matmul_reference.py", f"{here}/jaxbench/tasks", f"{here}/README.md"]
    seen = pool.run(JobSpec(fn="pool_jobs:read_paths", kwargs={"paths": names}, hide_paths=hidden))
    out["seen"] = {k[len(here) + 1:]: v for k, v in (seen.result or {}).items()}
    ev = Evaluator(pool, timeout_s=240)
    ok = ev.validate("examples/matmul_kernel.py", "examples/matmul_reference.py", "tpu-v6e", seeds=1)
    out["ok"] = ok.model_dump(mode="json", include={"ok", "failure", "environment"})
    steal = ev.validate(
        "tests/kernels/adversarial/reads_reference_file.py", "examples/matmul_reference.py", "cpu", seeds=1
    )
    out["steal"] = steal.model_dump(mode="json", include={"ok", "failure"})
    an = ev.analyze("examples/matmul_kernel.py", "examples/matmul_reference.py", "tpu-v6e")
    out["analyze"] = an.model_dump(mode="json", include={"ok", "failure"})
print("RESULT " + json.dumps(out))
"""


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def clone():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp itself, whatever TMPDIR says: the case at issue
    try:
        repo = base / "mk"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True)
        changed = _git("ls-files", "-z", "-m", "-o", "--exclude-standard", cwd=ROOT).split("\0")
        for rel in filter(None, changed):
            src = ROOT / rel
            if src.is_file():
                (repo / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, repo / rel)
        for rel in filter(None, _git("ls-files", "-z", "-d", cwd=ROOT).split("\0")):
            (repo / rel).unlink(missing_ok=True)
        venv = repo / ".venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        py = venv / "bin" / "python"
        site = subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(site, "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        install = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps"]
        install += ["--no-build-isolation", "--disable-pip-version-check", "-e", str(repo)]
        subprocess.run(install, check=True, capture_output=True, text=True)
        yield repo
    finally:
        shutil.rmtree(base, ignore_errors=True)


def tiers() -> list[str]:
    out = []
    for tier in ("bwrap", "namespaces"):
        sandbox._detect.cache_clear()
        try:
            if sandbox._detect(tier).tier == tier:
                out.append(tier)
        except sandbox.SandboxUnavailable:
            pass
        finally:
            sandbox._detect.cache_clear()
    return out


@pytest.mark.parametrize("tier", ["bwrap", "namespaces"])
def test_a_fresh_clone_under_tmp_validates_and_analyzes_and_still_hides_the_reference(clone, tier):
    if tier not in tiers():
        pytest.skip(f"the {tier} tier is not available on this host")
    env = {**os.environ, "MAXKERNEL_SANDBOX": tier}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", CHECK],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["package"].startswith(str(clone))  # the clone's code ran, not this checkout's
    assert out["ok"]["environment"]["sandbox"]["tier"] == tier
    assert out["ok"]["ok"] is True, out["ok"]["failure"]
    assert out["analyze"]["ok"] is True, out["analyze"]["failure"]
    # the clone (on sys.path through the cwd) is shown read-only, but its hidden paths are still masked
    assert out["seen"]["examples/matmul_reference.py"] == "0 bytes", out["seen"]
    assert out["seen"]["jaxbench/tasks"] in ("PermissionError", "dir of 0"), out["seen"]
    assert out["seen"]["README.md"] == f"{(clone / 'README.md').stat().st_size} bytes", out["seen"]
    assert out["steal"]["ok"] is False and out["steal"]["failure"]["kind"] == "reached_reference", out[
        "steal"
    ]


def test_the_demos_loop_runs_from_a_fresh_clone_under_tmp(clone, tmp_path):
    """The demo's Auto loop (one iteration, no autotune: the demo's own two take minutes) on its task."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [str(clone / ".venv" / "bin" / "maxkernel-orchestrate"), "auto", "--reference", "12p_RMSNorm"]
    argv += ["--size", "small", "--target", "tpu-v6e", "--model", "offline", "--iterations", "1"]
    argv += ["--run-dir", str(tmp_path / "run")]
    proc = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["iterations"][0]["verified"] is True, summary["iterations"][0]
    assert "internal_error" not in (tmp_path / "run" / "summary.json").read_text()
