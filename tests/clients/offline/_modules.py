"""What the template tests share: a reference's traced program, and a written kernel (or reference) loaded
as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from maxkernel.tpu_tools.problem.program import describe


def program_of(path: Path) -> dict:
    return describe(str(path)).model_dump(mode="json")


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def written(path: Path, source: str):
    """`source` written to `path` and loaded as a module (a template's rendered kernel, an edited one)."""
    path.write_text(source)
    return load(path, path.stem)
