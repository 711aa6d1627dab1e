"""The package as users get it: every room's packages and data files, installed as maxkernel.<folder>.

The fast tests read the package list setup.py discovers and the files the package-data globs ship, and
compare them with the folders in the checkout, so a new subpackage or data file that would be left out of
the wheel fails here. The slow test builds the sdist from a copy of the checkout, a wheel from that sdist,
installs the wheel (not editable) into a fresh venv outside the checkout and runs every entry point and one
job of each kind from there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest_paths import ROOT, scratch_outside_tmp

ROOMS = ("tpu_tools", "jaxbench", "subagents", "server", "clients")


def _setup_module():
    spec = importlib.util.spec_from_file_location("maxkernel_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # defines discovered_packages; setup() runs only as __main__
    return mod


def _tracked_files(*, untracked: bool = False) -> list[str]:
    """The checkout's files under the rooms as a fresh clone has them (tracked, still present), plus the
    new files git does not ignore if `untracked` (the working tree as it would be committed)."""
    extra = ["--others", "--exclude-standard"] if untracked else []
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", *extra, "--", *ROOMS],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked file list is what a fresh clone ships")
    return sorted(f for f in out.decode().split("\0") if f and (ROOT / f).is_file())


def _shipped_files(packages: list[str]) -> set[str]:
    """What setuptools puts in the wheel for these packages: each package's modules and its package-data
    globs (the "*" entry applies to every package), as paths relative to the checkout."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir, data = tool["package-dir"], tool.get("package-data", {})
    out: set[str] = set()
    for pkg in packages:
        root = next(
            n for n in sorted(package_dir, key=len, reverse=True) if pkg == n or pkg.startswith(n + ".")
        )
        folder = ROOT / package_dir[root] / Path(*pkg[len(root) :].split(".")[1:])
        out |= {p.relative_to(ROOT).as_posix() for p in folder.glob("*.py")}
        for pattern in [*data.get("*", []), *data.get(pkg, [])]:
            out |= {p.relative_to(ROOT).as_posix() for p in folder.glob(pattern) if p.is_file()}
    return out


def test_discovered_packages_are_every_folder_with_an_init():
    """Every importable folder under the five rooms is a package (os.walk, independent of setuptools'
    finder, which does not descend below a folder without __init__.py)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {f"maxkernel.{r}": r for r in ROOMS}
    assert "packages" not in tool, "the package list is discovered by setup.py, not kept by hand"
    expected = set()
    for room in ROOMS:
        for here, dirs, files in os.walk(ROOT / room):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            parts = Path(here).relative_to(ROOT).parts
            if "__init__.py" in files and all(p.isidentifier() for p in parts):
                expected.add("maxkernel." + ".".join(parts))
    found = _setup_module().discovered_packages(ROOT)
    assert len(found) == len(set(found))
    assert set(found) == expected
    assert {"maxkernel.tpu_tools.model", "maxkernel.clients.model", "maxkernel.jaxbench.models"} <= expected


def test_every_tracked_file_under_the_rooms_is_shipped():
    """A module, a prompt, a template, a tuned config or a task folder the glob misses fails here (the
    wheel would import fine and then fail at the first read)."""
    shipped = _shipped_files(_setup_module().discovered_packages(ROOT))
    missing = [f for f in _tracked_files() if f not in shipped]
    assert not missing, f"in the checkout but not in the wheel: {missing}"


def test_the_file_list_check_catches_a_package_missed(tmp_path):
    """The check above is not vacuous: dropping one discovered package loses its files."""
    packages = _setup_module().discovered_packages(ROOT)
    shipped = _shipped_files([p for p in packages if p != "maxkernel.jaxbench.models"])
    assert any(f.startswith("jaxbench/models/") and f not in shipped for f in _tracked_files())


# ------------------------------------------------------------------------- build, install, run


def _copy_checkout(dest: Path) -> None:
    """The working tree as it would be committed (tracked and new files git does not ignore; no build/ or
    egg-info left from earlier builds, which setuptools would otherwise reuse)."""
    cmd = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True).stdout
    for f in out.decode().split("\0"):
        if f and (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - t0
    print(f"{took:6.1f} s  {' '.join(str(c) for c in cmd)[:160]}")
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


@pytest.mark.slow
def test_wheel_from_sdist_runs_every_command_from_a_fresh_venv():
    work = scratch_outside_tmp("maxkernel-wheel-")  # not under /tmp: the job sandbox hides /tmp
    try:
        _wheel_from_sdist_runs(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wheel_from_sdist_runs(work: Path) -> None:
    py = sys.executable
    src, dist = work / "src", work / "dist"
    src.mkdir()
    _copy_checkout(src)
    # the sdist, as `python -m build --no-isolation --sdist` makes it (the PEP 517 hook itself)
    hook = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"
    name = _run([py, "-c", hook, "build_sdist", str(dist)], cwd=src).strip().splitlines()[-1]
    sdist = dist / name
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
        tar.extractall(work / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    expected = set(_tracked_files(untracked=True))
    assert expected - members == set(), f"left out of the sdist: {sorted(expected - members)}"
    assert {"pyproject.toml", "setup.py", "README.md"} <= members
    # the wheel, built from the unpacked sdist (so the sdist alone is enough to build it)
    (unpacked,) = (work / "unpacked").iterdir()
    wheel = dist / _run([py, "-c", hook, "build_wheel", str(dist)], cwd=unpacked).strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        files = {n for n in z.namelist() if ".dist-info/" not in n}
    assert all(n.startswith("maxkernel/") for n in files), sorted(
        n for n in files if not n.startswith("maxkernel/")
    )
    assert {n.removeprefix("maxkernel/") for n in files} == expected

    # a fresh venv; the wheel goes in before the checkout's venv is visible, so pip cannot touch that one
    venv = work / "venv"
    vpy = venv / "bin" / "python"
    _run([py, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    _run(
        [py, "-m", "pip", "--python", str(vpy), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        cwd=work,
    )
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(vpy), "-c", purelib], cwd=work).split()[-1])
    # the dependencies (jax and the rest) from the test's own environment, without a download: a plain
    # path line, so that environment's editable maxkernel finder (a .pth of its own) is never loaded
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("GEMINI_API_KEY", None)
    run = work / "run"
    run.mkdir()

    def cmd(*argv: str) -> str:
        return _run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=run, env=env)

    where = cmd("python", "-c", "import maxkernel.tpu_tools.cli.main as m; print(m.__file__)")
    assert where.strip().startswith(str(site)), where  # the wheel's copy, not the checkout's
    assert "compile" in cmd("maxkernel", "--help")
    assert "tpu-v6e" in cmd("maxkernel", "chips")
    assert "50 single-chip tasks" in cmd("maxkernel", "tasks")  # jaxbench/tasks read from the wheel
    assert "--transport" in cmd("maxkernel-server", "--help")
    assert "auto" in cmd("maxkernel-orchestrate", "--help")

    kernel, reference = (
        str(ROOT / "examples" / "matmul_kernel.py"),
        str(ROOT / "examples" / "matmul_reference.py"),
    )
    out = json.loads(
        cmd("maxkernel", "compile", kernel, "--reference", reference, "--target", "tpu-v6e", "--json")
    )
    assert out["ok"] is True, out
    validate = ["validate", kernel, "--reference", reference, "--size", "small", "--seeds", "1", "--json"]
    out = json.loads(cmd("maxkernel", *validate))
    assert out["ok"] is True, out
    # a shipped model by id: jaxbench/models read from the installed package
    out = json.loads(
        cmd("maxkernel", "hotspots", "vit_l16_block", "--target", "tpu-v6e", "--size", "small", "--json")
    )
    assert out["regions"] and out["path"].startswith(str(site)), out.get("path")
    # one offline iteration of the whole loop: the spawned MCP server, the offline model's templates and
    # the subagents' prompts, all from the wheel
    auto = ["auto", "--reference", "12p_RMSNorm", "--model", "offline", "--iterations", "1", "--seeds", "1"]
    cmd(
        "maxkernel-orchestrate",
        *auto,
        "--test-cases",
        "0",
        "--check-size",
        "small",
        "--run-dir",
        str(run / "auto"),
    )
    summary = json.loads((run / "auto" / "summary.json").read_text())
    assert summary["iterations_finished"] == 1 and summary["best"] is not None, summary
