"""The server's one directory of files: kernels saved by content hash, artifacts, and path checks.

A model sends kernel text; we save it under `kernels/<sha256>.py` so every verdict names the exact
bytes it judged, and the same text always lands on the same file. Paths a client sends are resolved
inside the workspace only: `..` or a symlink that leads outside is refused.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


class WorkspaceError(ValueError):
    """A path the caller sent is outside the workspace, missing, or not the kind of file expected."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Workspace:
    """`<root>/kernels/<sha>.py` for submitted sources, `<root>/artifacts/<sha>.json` for summaries."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).expanduser().resolve()
        self.kernels = self.root / "kernels"
        self.artifacts = self.root / "artifacts"
        for d in (self.root, self.kernels, self.artifacts):
            d.mkdir(parents=True, exist_ok=True)

    def _write_once(self, path: Path, text: str) -> Path:
        """Write atomically unless the file is already there (same name = same content)."""
        if not path.exists():
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        return path

    def save_kernel(self, source: str) -> Path:
        return self._write_once(self.kernels / f"{sha256_text(source)}.py", source)

    def save_artifact(self, text: str, suffix: str = ".json") -> tuple[str, Path]:
        sha = sha256_text(text)
        return sha, self._write_once(self.artifacts / f"{sha}{suffix}", text)

    def resolve(self, path: str, *, kind: str = "file", must_exist: bool = True) -> Path:
        """`path` (relative to the root, or absolute) as a real path inside the workspace."""
        if not path or not path.strip():
            raise WorkspaceError(f"empty {kind} path")
        raw = Path(path).expanduser()
        candidate = raw if raw.is_absolute() else self.root / raw
        real = candidate.resolve()  # follows symlinks, folds '..'
        if real != self.root and self.root not in real.parents:
            raise WorkspaceError(
                f"{kind} path {path!r} is outside the workspace {self.root} (after resolving '..' and "
                "symlinks); put the file inside the workspace or send its text instead"
            )
        if must_exist and not real.exists():
            raise WorkspaceError(f"{kind} not found in the workspace: {path!r} (looked at {real})")
        return real

    def artifact(self, sha: str) -> Path:
        """A saved kernel or artifact by its sha256."""
        if not _SHA_RE.match(sha):
            raise WorkspaceError(f"not a sha256 hex digest: {sha!r}")
        for path in (self.kernels / f"{sha}.py", *sorted(self.artifacts.glob(f"{sha}.*"))):
            if path.is_file():
                return path
        raise WorkspaceError(f"no saved kernel or artifact with sha256 {sha}")
