"""The example index: working Pallas TPU kernels a role can read before it writes one.

Sources, all read as files (never imported or executed):
- the installed jax's `jax/experimental/pallas/ops/tpu` (flash, splash, paged and ragged paged attention,
  megablox gmm, matmul, all-gather, PRNG), so the examples are always those of the jax in use;
- our JaxBench Pallas references (`jaxbench/tasks/*/pallas_reference.py`);
- the Pallas-on-TPU guide's sections (where an error's fix is explained in words);
- folders the user names (`--examples DIR`).

One SQLite FTS5 table (stdlib sqlite3, bm25 ranking) is built per (jax version, our sources' hash, user
folders' file list) and cached under `$MAXKERNEL_CACHE_DIR` or `~/.cache/maxkernel`. No embeddings:
keyword search over kernel names, what-tags, primitives and docstrings meets the retrieval benchmark
(benchmarks/example_retrieval.py), so a model download buys nothing measurable here.

Token counts are estimates: ceil(characters / 4).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from maxkernel.tpu_tools.examples.excerpt import make_hits
from maxkernel.tpu_tools.examples.models import (
    ExampleEntry,
    ExampleError,
    ExampleHit,
    ExampleSearch,
    IndexInfo,
    Source,
    tokens,
)
from maxkernel.tpu_tools.examples.parse import parse_kernels, reference_primitives
from maxkernel.tpu_tools.examples.query import Search, build_search

SCHEMA_VERSION = 1
DEFAULT_K = 3
DEFAULT_BUDGET_TOKENS = 2000
MAX_USER_FILES = 2000
MAX_FILE_BYTES = 1_000_000
# bm25 column weights: name, what, primitives, doc, body
_WEIGHTS = (6.0, 5.0, 2.0, 2.0, 0.5)
_SKIP_DIRS = {".venv", "venv", "__pycache__", "node_modules", ".git", "site-packages"}
# ------------------------------------------------------------------------------------ where things are


def cache_dir() -> Path:
    return Path(os.environ.get("MAXKERNEL_CACHE_DIR") or Path.home() / ".cache" / "maxkernel")


def _package_dir(name: str) -> Path | None:
    """A package's folder without importing it (find_spec imports parents only)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def jax_ops_dir() -> Path | None:
    jax_dir = _package_dir("jax")
    ops = jax_dir / "experimental" / "pallas" / "ops" / "tpu" if jax_dir else None
    return ops if ops and ops.is_dir() else None


def jax_version() -> str:
    try:
        return version("jax")
    except PackageNotFoundError:
        return "unknown"


def _our_version() -> str:
    try:
        return version("maxkernel")
    except PackageNotFoundError:
        return "0"


def _jaxbench_refs() -> list[Path]:
    tasks = _package_dir("maxkernel.jaxbench.tasks")
    return sorted(tasks.glob("*/pallas_reference.py")) if tasks else []


def guide_path() -> Path | None:
    sub = _package_dir("maxkernel.subagents")  # read as data: the guide is a packaged markdown file
    path = sub / "guides" / "pallas_tpu.md" if sub else None
    return path if path and path.is_file() else None


def _py_files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
        if len(out) >= MAX_USER_FILES:
            break
    return out[:MAX_USER_FILES]


# ------------------------------------------------------------------------------------ building entries


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _kernel_entries(
    path: Path, prefix: str, source: Source, ver: str, task: str | None, where: str = ""
) -> list[ExampleEntry]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return []
        src = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if "pallas_call" not in src:
        return []
    out = []
    for k in parse_kernels(src, str(path)):
        out.append(
            ExampleEntry(
                id=_slug(f"{prefix}.{k.kernel}"),
                kind="kernel",
                source=source,
                version=ver if source == "jax" else f"{ver}+{_sha(src)[:12]}",
                path=str(path),
                where=where,
                line=k.line,
                name=k.kernel,
                wrapper=k.wrapper,
                task=task,
                what=k.what,
                primitives=k.primitives,
                pattern=k.pattern,
                features=k.features,
                doc=k.doc,
                kernel_source=k.kernel_source,
                call_source=k.call_source,
                helper_source=k.helper_source,
                wrapper_source=k.wrapper_source,
            )
        )
    return out


def _guide_entries(path: Path) -> list[ExampleEntry]:
    text = path.read_text(encoding="utf-8")
    out = []
    for part in re.split(r"(?m)^(?=## )", text):
        if not part.startswith("## "):
            continue
        title = part.splitlines()[0][3:].strip()
        out.append(
            ExampleEntry(
                id=_slug("guide." + re.sub(r"[^a-z0-9]+", "-", title.lower())),
                kind="guide",
                source="guide",
                version=f"{_our_version()}+{_sha(text)[:12]}",
                path=str(path),
                where="subagents/guides/pallas_tpu.md",
                name=title,
                what=["guide"],
                kernel_source=part.rstrip(),
            )
        )
    return out


def collect_entries(user_dirs: Sequence[str | os.PathLike] = ()) -> list[ExampleEntry]:
    """Every entry from jax's ops, our references, the guide and `user_dirs` (ids made unique)."""
    entries: list[ExampleEntry] = []
    ops, jv = jax_ops_dir(), jax_version()
    if ops is not None:
        for f in sorted(ops.rglob("*.py")):
            rel = f.relative_to(ops).with_suffix("")
            where = "jax/experimental/pallas/ops/tpu/" + f.relative_to(ops).as_posix()
            entries += _kernel_entries(f, "jax." + ".".join(rel.parts), "jax", jv, None, where)
    for f in _jaxbench_refs():
        where = f"jaxbench/tasks/{f.parent.name}/{f.name}"
        entries += _kernel_entries(
            f, f"jaxbench.{f.parent.name}", "jaxbench", _our_version(), f.parent.name, where
        )
    guide = guide_path()
    if guide is not None:
        entries += _guide_entries(guide)
    for d in user_dirs:
        root = Path(d).expanduser().resolve()
        for f in _py_files(root):
            rel = f.relative_to(root).with_suffix("")
            entries += _kernel_entries(f, f"user.{root.name}." + ".".join(rel.parts), "user", "file", None)
    seen: dict[str, int] = {}
    for e in entries:  # two kernels with one name in one module: suffix the later ones
        n = seen.get(e.id, 0)
        seen[e.id] = n + 1
        if n:
            e.id = f"{e.id}-{n + 1}"
    return entries


def _fingerprint(user_dirs: Sequence[Path]) -> str:
    """What the cached index depends on: jax's ops files, our files and parser, the user's files."""
    h = hashlib.sha256(f"schema{SCHEMA_VERSION}|jax{jax_version()}|ours{_our_version()}".encode())
    ops = jax_ops_dir()
    for f in sorted(ops.rglob("*.py")) if ops else []:
        st = f.stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}".encode())
    here = Path(__file__).parent
    for f in [
        *_jaxbench_refs(),
        guide_path(),
        here / "parse.py",
        here / "index.py",
        here / "models.py",
    ]:
        if f is not None and f.is_file():
            h.update(f.read_bytes())
    for d in user_dirs:
        h.update(f"user|{d}".encode())
        for f in _py_files(d):
            st = f.stat()
            h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------ the index


def _body(e: ExampleEntry) -> str:
    return "\n".join([e.kernel_source, e.helper_source, e.call_source])


def _name_text(e: ExampleEntry) -> str:
    rel = e.id.replace(".", " ")
    return f"{rel} {e.name} {e.wrapper} {' '.join(e.what)}"


def _write_db(path: Path, entries: list[ExampleEntry], info: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".examples-", suffix=".sqlite", dir=path.parent)
    os.close(fd)
    try:
        con = sqlite3.connect(tmp)
        with con:
            con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            con.execute("CREATE TABLE entries (id TEXT PRIMARY KEY, json TEXT)")
            con.execute(
                "CREATE VIRTUAL TABLE fts USING fts5(id UNINDEXED, name, what, primitives, doc, body, "
                "tokenize='porter unicode61')"
            )
            con.executemany(
                "INSERT INTO entries VALUES (?, ?)", [(e.id, e.model_dump_json()) for e in entries]
            )
            con.executemany(
                "INSERT INTO fts VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        e.id,
                        _name_text(e),
                        " ".join(e.what + e.features),
                        " ".join(e.primitives),
                        f"{e.doc}\n{e.pattern}",
                        _body(e),
                    )
                    for e in entries
                ],
            )
            con.execute("INSERT INTO meta VALUES ('info', ?)", (json.dumps(info),))
        con.close()
        os.replace(tmp, path)  # readers see the old file or the whole new one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class ExampleIndex:
    """A built index (opened read-only per query); `open()` builds it when the cache has none."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._connect() as con:
            self.info = IndexInfo.model_validate(
                json.loads(con.execute("SELECT value FROM meta WHERE key='info'").fetchone()[0])
            )

    @classmethod
    def open(
        cls, user_dirs: Iterable[str | os.PathLike] = (), cache: str | os.PathLike | None = None
    ) -> ExampleIndex:
        dirs = []
        for d in user_dirs:
            p = Path(d).expanduser().resolve()
            if not p.is_dir():
                raise ExampleError(f"examples folder not found: {d}")
            dirs.append(p)
        root = Path(cache) if cache is not None else cache_dir()
        path = root / f"examples-jax{_slug(jax_version())}-{_fingerprint(dirs)}.sqlite"
        if not path.exists():
            entries = collect_entries(dirs)
            by_source: dict[str, int] = {}
            for e in entries:
                by_source[e.source] = by_source.get(e.source, 0) + 1
            info = {
                "path": str(path),
                "jax_version": jax_version(),
                "entries": len(entries),
                "by_source": by_source,
                "user_dirs": [str(d) for d in dirs],
            }
            try:
                _write_db(path, entries, info)
            except (OSError, sqlite3.Error) as e:
                raise ExampleError(
                    f"cannot write the example index under {root} ({e}): set MAXKERNEL_CACHE_DIR to a "
                    "writable folder"
                ) from None
            _prune(root, keep=path)
        return cls(path)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)

    def get(self, entry_id: str) -> ExampleEntry:
        with self._connect() as con:
            row = con.execute("SELECT json FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise ExampleError(f"no example {entry_id!r}: search with find_examples for ids")
        return ExampleEntry.model_validate_json(row[0])

    def ids(self) -> list[str]:
        with self._connect() as con:
            return [r[0] for r in con.execute("SELECT id FROM entries ORDER BY id")]

    def search(
        self,
        query: str = "",
        *,
        operator: str = "",
        primitives: Sequence[str] = (),
        error: str = "",
        reference_source: str = "",
        k: int = DEFAULT_K,
        budget_tokens: int = DEFAULT_BUDGET_TOKENS,
        kinds: Sequence[str] = ("kernel", "guide"),
        exclude_tasks: Sequence[str] = (),
        min_score_ratio: float = 0.0,
    ) -> ExampleSearch:
        """Top `k` entries for any mix of inputs, excerpts cut so all hits fit in `budget_tokens`.

        `min_score_ratio`: drop hits scoring below this fraction of the best (a prompt shows one clear
        match alone, with the whole budget, rather than padding it with weak ones)."""
        config, prims = reference_primitives(reference_source) if reference_source else ({}, [])
        s = build_search(query, operator, [*primitives, *prims], error, config or None)
        ranked = self._rank(s, kinds, set(exclude_tasks))[:k]
        if ranked:
            ranked = [r for r in ranked if r[1] >= min_score_ratio * ranked[0][1]]
        hits = make_hits(ranked, budget_tokens, sorted(s.features))
        return ExampleSearch(
            mode=s.mode,
            words=s.words,
            features=sorted(s.features),
            error_families=s.families,
            budget_tokens=budget_tokens,
            used_tokens=sum(h.excerpt_tokens for h in hits),
            hits=hits,
            index=self.info,
        )

    def _rank(
        self, s: Search, kinds: Sequence[str], exclude_tasks: set[str]
    ) -> list[tuple[ExampleEntry, float]]:
        if not s.words:
            return []
        match = " OR ".join('"' + w.replace('"', "") + '"' for w in s.words[:64])
        weights = ", ".join(str(w) for w in _WEIGHTS)
        with self._connect() as con:
            rows = con.execute(
                f"SELECT e.json, -bm25(fts, 0, {weights}) FROM fts JOIN entries e ON e.id = fts.id "
                "WHERE fts MATCH ? ORDER BY bm25(fts, 0, " + weights + ") LIMIT 200",
                (match,),
            ).fetchall()
        out = []
        for js, score in rows:
            e = ExampleEntry.model_validate_json(js)
            if e.kind not in kinds or (e.task and e.task in exclude_tasks):
                continue
            # an error's fix is shown by kernels having its feature (e.g. vmem_limit_bytes set)
            boost = 1.0 + 0.5 * len(s.features & set(e.features))
            # An error's words describe a fix ("double buffered", "smaller blocks"), not a kernel's name.
            names = s.mode != "error"
            structured = _structured(s.words, e, names) + _structured(s.primary, e, names)  # main op twice
            out.append((e, (float(score) + structured) * boost))
        out.sort(key=lambda t: -t[1])
        return out


def _split(text: str) -> set[str]:
    return {w.lower().rstrip("s") for w in re.split(r"[^A-Za-z0-9]+", text) if len(w) > 1}


def _structured(words: Sequence[str], e: ExampleEntry, names: bool = True) -> float:
    """What bm25 misses on a small corpus: words every kernel shares ('matmul') have near-zero idf,
    yet a query word in the kernel's own name, or among its few what-tags, says it is that kind of kernel.
    Many tags dilute each tag (sqrt), so a kernel that does everything does not match everything."""
    w = {x.lower().rstrip("s") for x in words}
    name = len(w & _split(f"{e.id} {e.name} {e.wrapper}")) if names else 0
    tags = _split(" ".join(e.what))
    what = len(w & tags) / max(1.0, len(tags)) ** 0.5
    if not w:
        return 0.0
    prims = len(w & {p.rsplit(".", 1)[-1].lower().rstrip("s") for p in e.primitives})
    return 2.0 * name + 2.0 * what + 0.3 * prims


def _prune(root: Path, keep: Path, max_files: int = 6) -> None:
    """Old index files (other jax versions, changed folders): keep the newest few."""
    try:
        files = sorted(root.glob("examples-*.sqlite"), key=lambda p: p.stat().st_mtime, reverse=True)
        for f in files[max_files:]:
            if f != keep:
                f.unlink(missing_ok=True)
    except OSError:  # another process pruned at the same time: nothing to do
        pass


__all__ = [
    "DEFAULT_BUDGET_TOKENS",
    "ExampleEntry",
    "ExampleError",
    "ExampleHit",
    "ExampleIndex",
    "ExampleSearch",
    "IndexInfo",
    "cache_dir",
    "collect_entries",
    "jax_ops_dir",
    "tokens",
]
