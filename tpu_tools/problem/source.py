"""Import a user's Python file exactly as hashed, and say where in it an error surfaced.

Shared by the reference loader (problem/reference.py) and the candidate loader (judged/candidate.py):
the two sides load files the same way, but neither imports the other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.hardware.mesh import MeshSpec

ReferenceKind = Literal["maxkernel", "jaxbench-style", "jaxbench-config", "maxkernel-task-dir"]


class ReferenceInfo(BaseModel):
    """What the verdict says about the reference it used."""

    name: str
    path: str
    kind: ReferenceKind
    sha256: str
    sizes: list[str]
    seedable: bool
    atol: float | None = None
    rtol: float | None = None
    notes: list[str] = []
    mesh: MeshSpec | None = Field(
        default=None, description="the reference's MESH: a multi-chip kernel runs on this many devices"
    )
    pallas: bool = Field(
        default=False,
        description="the reference is a Pallas kernel (a baseline): its program is what a candidate is scored against",
    )


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_file(path: Path, prefix: str) -> tuple[ModuleType, str]:
    """Import a file by executing the bytes read here, once: (module, sha256 of exactly what ran).

    Reading once means a file rewritten on disk after we looked cannot run in place of what we hashed.
    """
    source = path.read_bytes()
    sha = hashlib.sha256(source).hexdigest()
    digest = hashlib.sha256(str(path.resolve()).encode() + source).hexdigest()[:12]
    name = f"_maxkernel_{prefix}_{digest}"
    if name in sys.modules:
        return sys.modules[name], sha
    if path.name == "__init__.py":
        spec = importlib.util.spec_from_file_location(
            name, path, submodule_search_locations=[str(path.parent)]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # sibling imports (helpers beside the file) work as users expect
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the hashed bytes, nothing else
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module, sha


def missing_package(exc: BaseException) -> str | None:
    """One line for a file that imports a package not installed here: which, and how to install it."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top in ("jax", "jaxlib", "numpy"):  # part of jax itself: a version mismatch, not a missing package
        return None
    return f"it imports {top}, which is not installed here: pip install {top.replace('_', '-')}"


def user_frame_line(tb, path: Path) -> int | None:
    """The line in `path` where the error surfaced (the last frame in that file)."""
    line = None
    for frame in traceback.extract_tb(tb):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return line
