"""A non-editable install lays every room out as maxkernel.<folder>, data files included."""

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_wheel_install_imports_from_outside_the_repo(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            root,
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    assert (
        not (target / "server").exists() and not (target / "tpu_tools").exists()
    )  # nothing generic at top level
    code = (
        "import maxkernel.tpu_tools.cli.main, maxkernel.jaxbench.registry as r, maxkernel.subagents.guide as g;"
        "assert len(r.list_task_ids()) == 50, r.list_task_ids();"
        "assert r.pallas_reference_path('8p') is not None and r.pallas_reference_path('13p') is not None;"
        "import maxkernel.tpu_tools.cost.tuned_configs as t; assert (t.SHIPPED_DIR / 'tpu-v6e.json').is_file();"
        "assert 'VMEM' in g.load_guide();"
        "import maxkernel.server, maxkernel.clients.models;"
        "print(maxkernel.tpu_tools.__file__)"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert str(target) in out.stdout
