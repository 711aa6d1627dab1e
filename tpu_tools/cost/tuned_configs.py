"""Tuned configs per chip: the best tiling an autotune or a search found, kept for the next run.

An entry is keyed by chip, problem signature (the dimensions that fix every input shape, and the
dtype), the kernel template's hash and the jax/libtpu versions, so a config tuned for another chip,
shape, template or compiler is never offered. Entries live in SQLite in the user cache directory
($MAXKERNEL_CACHE_DIR, else ~/.cache/maxkernel); they export to and import from JSON, one file per
chip, like tokamax's data/autotuning/. Configs this package ships (found by the suite for our own
references) sit in `tpu_tools/data/tuned_configs/<chip>.json` and answer when the user's DB has no
entry. Every entry names the tier that ranked it (`measured` on the chip, or `estimate`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SHIPPED_DIR = Path(__file__).parents[1] / "data" / "tuned_configs"
DB_FILE = "tuned_configs.sqlite"
_TIER_RANK = {"measured": 0, "estimate": 1}
_MIGRATIONS = [
    (
        "m001_initial",
        """CREATE TABLE tuned (
            chip TEXT NOT NULL, problem TEXT NOT NULL, template_sha256 TEXT NOT NULL,
            jax_version TEXT NOT NULL, libtpu_version TEXT NOT NULL, entry TEXT NOT NULL,
            PRIMARY KEY (chip, problem, template_sha256, jax_version, libtpu_version)
        )""",
    ),
]


class TunedKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    chip: str
    problem: str = Field(description="task|size|dimensions|dtype, see problem_signature")
    template_sha256: str
    jax_version: str
    libtpu_version: str


class TunedConfig(BaseModel):
    key: TunedKey
    config: dict[str, Any]
    time_us: float | None = None
    tier: Literal["measured", "estimate"] = Field(description="what ranked this config best")
    found_by: str = Field(description="'autotune', 'search', 'suite …'")
    task: str = ""
    created_at: float = Field(default_factory=time.time)

    def better_than(self, other: TunedConfig | None) -> bool:
        if other is None:
            return True
        mine, theirs = (
            (_TIER_RANK[self.tier], self.time_us or 1e30),
            (_TIER_RANK[other.tier], other.time_us or 1e30),
        )
        return mine < theirs


def versions() -> tuple[str, str]:
    """(jax, libtpu) versions from the installed distributions (no import, no backend)."""

    def v(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "none"

    return v("jax"), v("libtpu") if v("libtpu") != "none" else v("libtpu-nightly")


def template_hash(template_source: str) -> str:
    return hashlib.sha256(template_source.encode("utf-8")).hexdigest()


def problem_signature(reference: str, size: str) -> str:
    """The dimensions that fix every input shape, and the dtype: from a JaxBench task's SIZES, or, for a
    reference file, its content hash (any edit is another problem)."""
    from maxkernel.jaxbench import registry

    try:
        tid = registry.resolve_id(reference)
    except registry.UnknownTaskError:
        path = Path(reference)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else reference
        return f"file:{digest}|{size}"
    task = registry.load_task(tid)
    dims = task.SIZES[size]
    dtype = dims.get("dtype") or task.CONFIG.get("dtype", "")
    return f"{tid}|{size}|{json.dumps(dims, sort_keys=True)}|{dtype}"


def make_key(chip: str, reference: str, size: str, template_source: str) -> TunedKey:
    jax_v, libtpu_v = versions()
    return TunedKey(
        chip=chip,
        problem=problem_signature(reference, size),
        template_sha256=template_hash(template_source),
        jax_version=jax_v,
        libtpu_version=libtpu_v,
    )


def cache_dir() -> Path:
    env = os.environ.get("MAXKERNEL_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "maxkernel"


class TunedConfigCache:
    def __init__(self, path: str | Path | None = None, *, shipped_dir: Path | None = SHIPPED_DIR) -> None:
        self.path = Path(path) if path is not None else cache_dir() / DB_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        done = {r[0] for r in self.db.execute("SELECT name FROM _migrations")}
        for name, sql in _MIGRATIONS:
            if name not in done:
                self.db.execute("BEGIN IMMEDIATE")
                self.db.execute(sql)
                self.db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
                self.db.execute("COMMIT")
        self.shipped_dir = shipped_dir

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> TunedConfigCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _key_tuple(k: TunedKey) -> tuple[str, ...]:
        return (k.chip, k.problem, k.template_sha256, k.jax_version, k.libtpu_version)

    def get(self, key: TunedKey) -> TunedConfig | None:
        """The user's entry for exactly this key, else a shipped one for exactly this key, else None."""
        r = self.db.execute(
            "SELECT entry FROM tuned WHERE chip=? AND problem=? AND template_sha256=? AND jax_version=? "
            "AND libtpu_version=?",
            self._key_tuple(key),
        ).fetchone()
        if r:
            return TunedConfig.model_validate_json(r[0])
        return next((e for e in self.shipped(key.chip) if e.key == key), None)

    def put(self, entry: TunedConfig) -> bool:
        """Keep `entry` if it beats what the key holds (measured over estimate, then faster); True if kept."""
        current = self.get(entry.key)
        if current is not None and not entry.better_than(current):
            return False
        self.db.execute(
            "INSERT OR REPLACE INTO tuned VALUES (?, ?, ?, ?, ?, ?)",
            (*self._key_tuple(entry.key), entry.model_dump_json()),
        )
        return True

    def entries(self, chip: str | None = None) -> list[TunedConfig]:
        q, args = (
            ("SELECT entry FROM tuned WHERE chip=?", (chip,)) if chip else ("SELECT entry FROM tuned", ())
        )
        return [TunedConfig.model_validate_json(r[0]) for r in self.db.execute(q, args)]

    def shipped(self, chip: str) -> list[TunedConfig]:
        if self.shipped_dir is None:
            return []
        path = self.shipped_dir / f"{chip}.json"
        return load_json(path) if path.is_file() else []

    def export_json(self, out_dir: str | Path, note: str = "") -> list[Path]:
        """One file per chip (`<chip>.json`), entries sorted so a re-export diffs cleanly; `note` says
        how they were found (each entry names its own tier)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for chip in sorted({e.key.chip for e in self.entries()}):
            entries = sorted(self.entries(chip), key=lambda e: (e.key.problem, e.key.template_sha256))
            path = out / f"{chip}.json"
            doc = {"chip": chip, "note": note, "entries": [e.model_dump(mode="json") for e in entries]}
            path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            paths.append(path)
        return paths

    def import_json(self, path: str | Path) -> int:
        """Merge a chip file; returns how many entries were kept (each only if it beats the current one)."""
        return sum(self.put(e) for e in load_json(Path(path)))


def load_json(path: Path) -> list[TunedConfig]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return [TunedConfig.model_validate(e) for e in doc["entries"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a tuned-config file ({type(e).__name__}: {e})") from None


def lookup(chip: str, reference: str, size: str, template_source: str) -> TunedConfig | None:
    """The cached best for this exact key, or None (also when the cache cannot be opened)."""
    try:
        with TunedConfigCache() as cache:
            return cache.get(make_key(chip, reference, size, template_source))
    except Exception:  # a cache is an optimisation: a broken one must never stop a sweep
        return None


def record(
    chip: str,
    reference: str,
    size: str,
    template_source: str,
    config: dict[str, Any],
    *,
    time_us: float | None,
    tier: Literal["measured", "estimate"],
    found_by: str,
) -> bool:
    try:
        with TunedConfigCache() as cache:
            entry = TunedConfig(
                key=make_key(chip, reference, size, template_source),
                config=dict(config),
                time_us=time_us,
                tier=tier,
                found_by=found_by,
                task=reference,
            )
            return cache.put(entry)
    except Exception:
        return False
