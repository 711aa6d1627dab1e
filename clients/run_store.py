"""A run's directory: every step's evidence on disk, and a journal to resume from.

    runs/<timestamp>-<task>/
        state.json            the journal: written atomically after each finished step
        ledger.json           every model call (tokens, cost, latency)
        test_cases.json       the tester's cases, asked once per task
        iter-01/plan.json  kernel-0.py  compile-0.json  validate-0.json  tests.json  profile.json
                trace_summary.json  analysis.json  autotune.json  autotune_template.py
                profile-<n>.json  analysis-<n>.json (an autotuned attempt)  transcript-<step>.json
                cost.json  kernel.py
        best_kernel.py  summary.json

Files are written to a temporary name and renamed into place, so a killed run never leaves a torn
file; `state.json` is written last in a step, so a step either happened entirely or not at all.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

STATE_FILE = "state.json"


class RunStoreError(ValueError):
    """A run directory is missing or not one of ours (the message names the path)."""


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "run"


def _dumps(obj: Any) -> str:
    if isinstance(obj, BaseModel):
        return obj.model_dump_json(indent=2) + "\n"
    return json.dumps(obj, indent=2, default=str) + "\n"


class RunStore:
    """One run directory."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    @classmethod
    def create(cls, out: str | os.PathLike, task: str, *, now: float | None = None) -> RunStore:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        base = Path(out) / f"{stamp}-{_slug(task)}"
        root, n = base, 1
        while root.exists():
            n += 1
            root = base.with_name(f"{base.name}-{n}")
        root.mkdir(parents=True)
        return cls(root)

    @classmethod
    def open(cls, run_dir: str | os.PathLike) -> RunStore:
        root = Path(run_dir)
        if not (root / STATE_FILE).is_file():
            raise RunStoreError(f"{run_dir} is not a run directory to resume (no {STATE_FILE} in it)")
        return cls(root)

    def path(self, rel: str) -> Path:
        return self.root / rel

    @staticmethod
    def iteration_dir(iteration: int) -> str:
        return f"iter-{iteration:02d}"

    def write_json(self, rel: str, obj: Any) -> Path:
        path = self.path(rel)
        atomic_write(path, _dumps(obj))
        return path

    def write_text(self, rel: str, text: str) -> Path:
        path = self.path(rel)
        atomic_write(path, text)
        return path

    def read_json(self, rel: str) -> Any:
        return json.loads(self.path(rel).read_text(encoding="utf-8"))

    def save_state(self, state: BaseModel) -> None:
        self.write_json(STATE_FILE, state)

    def load_state_json(self) -> str:
        try:
            return self.path(STATE_FILE).read_text(encoding="utf-8")
        except OSError as e:
            raise RunStoreError(f"cannot read {self.path(STATE_FILE)}: {e.strerror}") from None
