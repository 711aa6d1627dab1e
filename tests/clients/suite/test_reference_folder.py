"""`suite --reference DIR` over a folder of JAX reference files: level 2 as cloned (`<task>/baseline.py`) or a
user's own set of files, each a task as it stands (no port)."""

from __future__ import annotations

import shutil
from pathlib import Path

from maxkernel.clients.suite.cli import _task_ids, jax_references

LEVEL2 = Path(__file__).resolve().parents[2] / "refs" / "level2"


def test_a_level2_layout_names_each_task_by_its_folder():
    refs = jax_references(str(LEVEL2))
    assert set(refs) == {
        "rowscale_config",
        "lengths_configs",
        "listed_configs",
        "missing_package",
        "gemm_config",
        "optional_none",
    }
    assert refs["rowscale_config"] == str((LEVEL2 / "rowscale_config" / "baseline.py").resolve())
    assert _task_ids(str(LEVEL2)) == list(refs)


def test_a_folder_of_reference_files_names_each_by_its_file(tmp_path):
    shutil.copyfile(LEVEL2 / "lengths_configs" / "baseline.py", tmp_path / "masked_sums.py")
    (tmp_path / "notes.py").write_text("x = 1\n")  # not a reference: no create_inputs / workload
    assert jax_references(str(tmp_path)) == {"masked_sums": str((tmp_path / "masked_sums.py").resolve())}
