"""Load a candidate kernel file: the one import of candidate code, done only inside a judged child.

The judge side never imports this module (tests/test_layout.py keeps it so).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from maxkernel.tpu_tools.errors import CandidateLoadError, UsageError
from maxkernel.tpu_tools.problem.config_reference import with_absent
from maxkernel.tpu_tools.problem.source import import_file, missing_package, user_frame_line


@dataclass
class Candidate:
    path: Path
    sha256: str
    workload: Callable[..., Any]
    module: ModuleType


def load_candidate(path_str: str, absent: list[int] | None = None) -> Candidate:
    """Import a candidate kernel file; import errors become CandidateLoadError with the file's line.

    `absent`: the reference's None inputs (ReferenceSide.absent_inputs), put back at those positions in
    every call, so a workload written for the published call (59p's rhs_bias=None) gets it."""
    path = Path(path_str).expanduser()
    if not path.is_file():
        raise UsageError(f"kernel file not found: {path_str}")
    try:
        module, sha = import_file(path, "candidate")
    except SyntaxError as e:
        raise CandidateLoadError(
            f"SyntaxError in candidate at line {e.lineno}: {e.msg}",
            line=e.lineno,
            detail=traceback.format_exc(),
        ) from None
    except BaseException as e:  # SystemExit included: a candidate must not end the evaluation
        line = user_frame_line(e.__traceback__, path)
        where = f" at line {line}" if line else ""
        missing = missing_package(e) if isinstance(e, Exception) else None
        raise CandidateLoadError(
            f"candidate failed to import{where}: {missing or f'{type(e).__name__}: {e}'}",
            line=line,
            detail=traceback.format_exc(),
        ) from None
    fn = getattr(module, "workload", None) or getattr(module, "computation", None)
    if fn is None or not callable(fn):
        raise CandidateLoadError("candidate defines no callable `workload(*inputs)` (or `computation`)")
    if absent:
        positions, own = list(absent), fn

        def fn(*args):  # noqa: F811 - the candidate's workload, called as the reference's file calls it
            return own(*with_absent(args, positions))

    return Candidate(path=path.resolve(), sha256=sha, workload=fn, module=module)
