"""SQLite storage for a search: the graph in the run directory, the evaluation cache beside it.

Every state change is one transaction in WAL mode, so `kill -9` at any moment loses at most the
evaluations in flight. On open, nodes a killed process left `running` go back to `pending`; finished
nodes are never touched again. Schema changes are numbered migrations (m001_initial, ...) recorded in
a `_migrations` table, as llm's log store does.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from maxkernel.clients.search.graph import Node, NodeVerdict, canonical_json, sha256_text

GRAPH_FILE = "search.sqlite"
CACHE_VERSION = "mkc1"

_GRAPH_MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_initial",
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE sources (hash TEXT PRIMARY KEY, text TEXT NOT NULL);
        CREATE TABLE nodes (
            id TEXT PRIMARY KEY,
            parent_id TEXT REFERENCES nodes(id),
            second_parent_id TEXT,
            source_hash TEXT NOT NULL REFERENCES sources(hash),
            strategy TEXT,
            plan TEXT,
            config TEXT,
            depth INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL CHECK (status IN ('pending','running','valid','invalid','failed')),
            verdict TEXT,
            time_us REAL,
            time_label TEXT,
            cost_usd REAL NOT NULL DEFAULT 0,
            cached INTEGER NOT NULL DEFAULT 0,
            eval_seq INTEGER UNIQUE,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL
        );
        CREATE INDEX nodes_status ON nodes(status);
        CREATE INDEX nodes_parent ON nodes(parent_id);
        CREATE TABLE edges (
            parent_id TEXT NOT NULL, child_id TEXT NOT NULL, strategy TEXT,
            PRIMARY KEY (parent_id, child_id)
        );
        CREATE TABLE proposals (key TEXT PRIMARY KEY, node_id TEXT);
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL,
            node_id TEXT, data TEXT
        );
        """,
    ),
]

_CACHE_MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_initial",
        """
        CREATE TABLE evaluations (
            key TEXT PRIMARY KEY, source_hash TEXT NOT NULL, reference_hash TEXT NOT NULL,
            target TEXT NOT NULL, size TEXT NOT NULL, tool_versions TEXT NOT NULL,
            verdict TEXT NOT NULL, created_at REAL NOT NULL
        );
        """,
    ),
]


def connect(path: Path, migrations: list[tuple[str, str]]) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=30000")
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    done = {r[0] for r in db.execute("SELECT name FROM _migrations")}
    for name, sql in migrations:
        if name in done:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            for stmt in filter(str.strip, sql.split(";")):
                db.execute(stmt)
            db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _row_node(r: sqlite3.Row) -> Node:
    v = _loads(r["verdict"])
    return Node(
        id=r["id"],
        parent_id=r["parent_id"],
        second_parent_id=r["second_parent_id"],
        source_hash=r["source_hash"],
        strategy=r["strategy"],
        plan=_loads(r["plan"]),
        config=_loads(r["config"]),
        depth=r["depth"],
        status=r["status"],
        verdict=NodeVerdict.model_validate(v) if v else None,
        time_us=r["time_us"],
        time_label=r["time_label"],
        cost_usd=r["cost_usd"],
        cached=bool(r["cached"]),
        eval_seq=r["eval_seq"],
        attempts=r["attempts"],
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
    )


class GraphStore:
    """The search graph of one run (`RUN_DIR/search.sqlite`)."""

    def __init__(self, path: str | Path, *, requeue: bool = True) -> None:
        """requeue=False for readers (reports) that must not touch a search still running."""
        p = Path(path)
        self.path = p / GRAPH_FILE if p.suffix != ".sqlite" else p
        self.db = connect(self.path, _GRAPH_MIGRATIONS)
        self.requeued = self._requeue_running() if requeue else 0

    def close(self) -> None:
        self.db.close()

    def _requeue_running(self) -> int:
        """A node left `running` by a killed process goes back to pending (its result was never written)."""
        with transaction(self.db):
            n = self.db.execute(
                "UPDATE nodes SET status='pending', started_at=NULL WHERE status='running'"
            ).rowcount
            if n:
                self._event("requeued", None, {"count": n})
        return n

    def _event(self, kind: str, node_id: str | None, data: dict[str, Any] | None = None) -> None:
        self.db.execute(
            "INSERT INTO events (at, kind, node_id, data) VALUES (?, ?, ?, ?)",
            (time.time(), kind, node_id, canonical_json(data) if data is not None else None),
        )

    # ---- meta
    def set_meta(self, key: str, value: Any) -> None:
        with transaction(self.db):
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, canonical_json(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(r[0]) if r else default

    def meta(self) -> dict[str, Any]:
        return {r[0]: json.loads(r[1]) for r in self.db.execute("SELECT key, value FROM meta")}

    # ---- nodes
    def add(self, node: Node, source: str, proposal_key: str | None = None) -> tuple[Node, bool]:
        """Insert a pending node (and its edge); an existing id returns the stored node and False."""
        with transaction(self.db):
            if proposal_key is not None:
                self.db.execute("INSERT OR IGNORE INTO proposals VALUES (?, ?)", (proposal_key, node.id))
            old = self.db.execute("SELECT * FROM nodes WHERE id=?", (node.id,)).fetchone()
            if old is not None:
                return _row_node(old), False
            self.db.execute("INSERT OR IGNORE INTO sources VALUES (?, ?)", (node.source_hash, source))
            self.db.execute(
                "INSERT INTO nodes (id, parent_id, second_parent_id, source_hash, strategy, plan, config, depth,"
                " status, cost_usd, created_at) VALUES (?,?,?,?,?,?,?,?,'pending',?,?)",
                (
                    node.id,
                    node.parent_id,
                    node.second_parent_id,
                    node.source_hash,
                    node.strategy,
                    None if node.plan is None else canonical_json(node.plan),
                    None if node.config is None else canonical_json(node.config),
                    node.depth,
                    node.cost_usd,
                    node.created_at,
                ),
            )
            for pid in filter(None, (node.parent_id, node.second_parent_id)):
                self.db.execute("INSERT OR IGNORE INTO edges VALUES (?, ?, ?)", (pid, node.id, node.strategy))
            self._event("added", node.id, {"cost_usd": node.cost_usd})
        return node, True

    def start(self, node_id: str) -> None:
        with transaction(self.db):
            self.db.execute(
                "UPDATE nodes SET status='running', started_at=?, attempts=attempts+1 WHERE id=? AND status='pending'",
                (time.time(), node_id),
            )

    def release(self, node_id: str) -> None:
        """Put a node whose evaluation was interrupted (not judged) back in the queue."""
        with transaction(self.db):
            self.db.execute("UPDATE nodes SET status='pending' WHERE id=? AND status='running'", (node_id,))

    def finish(self, node_id: str, verdict: NodeVerdict, *, cached: bool) -> Node:
        with transaction(self.db):
            seq = self.db.execute("SELECT COALESCE(MAX(eval_seq), 0) + 1 FROM nodes").fetchone()[0]
            self.db.execute(
                "UPDATE nodes SET status=?, verdict=?, time_us=?, time_label=?, cached=?, eval_seq=?,"
                " finished_at=? WHERE id=? AND status IN ('pending','running')",
                (
                    verdict.status,
                    verdict.model_dump_json(),
                    verdict.time_us,
                    verdict.time_label,
                    int(cached),
                    seq,
                    time.time(),
                    node_id,
                ),
            )
            self._event(
                "finished", node_id, {"status": verdict.status, "time_us": verdict.time_us, "cached": cached}
            )
        return self.get(node_id)

    def record_event(self, kind: str, node_id: str | None = None, data: dict[str, Any] | None = None) -> None:
        with transaction(self.db):
            self._event(kind, node_id, data)

    def proposal(self, key: str) -> tuple[bool, str | None]:
        """(known, node id or None): what asking the proposer `key` produced before (a resume replays it)."""
        r = self.db.execute("SELECT node_id FROM proposals WHERE key=?", (key,)).fetchone()
        return (r is not None), (r[0] if r else None)

    def set_proposal(self, key: str, node_id: str | None) -> None:
        with transaction(self.db):
            self.db.execute("INSERT OR REPLACE INTO proposals VALUES (?, ?)", (key, node_id))

    def get(self, node_id: str) -> Node:
        r = self.db.execute("SELECT * FROM nodes WHERE id=?", (node_id,)).fetchone()
        if r is None:
            raise KeyError(f"no node {node_id!r} in {self.path}")
        return _row_node(r)

    def source(self, src_hash: str) -> str:
        r = self.db.execute("SELECT text FROM sources WHERE hash=?", (src_hash,)).fetchone()
        if r is None:
            raise KeyError(f"no source {src_hash!r} in {self.path}")
        return r[0]

    def nodes(self, status: str | None = None) -> list[Node]:
        q, args = "SELECT * FROM nodes", ()
        if status:
            q, args = q + " WHERE status=?", (status,)
        return [_row_node(r) for r in self.db.execute(q + " ORDER BY created_at, id", args)]

    def first_proposal(self, node_id: str) -> str | None:
        r = self.db.execute(
            "SELECT key FROM proposals WHERE node_id=? ORDER BY rowid LIMIT 1", (node_id,)
        ).fetchone()
        return r[0] if r else None

    def first_with_source(self, src_hash: str) -> str | None:
        """The earliest node holding this kernel (a later node with the same source is a duplicate)."""
        r = self.db.execute(
            "SELECT id FROM nodes WHERE source_hash=? ORDER BY created_at, rowid LIMIT 1", (src_hash,)
        ).fetchone()
        return r[0] if r else None

    def has_source(self, src_hash: str) -> bool:
        return (
            self.db.execute("SELECT 1 FROM nodes WHERE source_hash=? LIMIT 1", (src_hash,)).fetchone()
            is not None
        )

    def events(self) -> list[dict[str, Any]]:
        return [
            {
                "seq": r["seq"],
                "at": r["at"],
                "kind": r["kind"],
                "node_id": r["node_id"],
                "data": _loads(r["data"]),
            }
            for r in self.db.execute("SELECT * FROM events ORDER BY seq")
        ]

    def total_cost_usd(self) -> float:
        return float(self.db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM nodes").fetchone()[0])


def cache_key(src_hash: str, reference_hash: str, target: str, size: str, tool_versions: str) -> str:
    body = canonical_json([CACHE_VERSION, src_hash, reference_hash, target, size, tool_versions])
    return f"{CACHE_VERSION}-{sha256_text(body)}"


class EvalCache:
    """Verdicts keyed by (kernel source hash, reference hash, target, size, tool versions).

    A plain SQLite file, safe to share between runs (and processes: WAL plus a busy timeout). Only
    judged verdicts (valid/invalid) are kept: a `failed` evaluation says nothing about the kernel.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = connect(self.path, _CACHE_MIGRATIONS)

    def close(self) -> None:
        self.db.close()

    def get(self, key: str) -> NodeVerdict | None:
        r = self.db.execute("SELECT verdict FROM evaluations WHERE key=?", (key,)).fetchone()
        return NodeVerdict.model_validate_json(r[0]) if r else None

    def put(self, key: str, parts: tuple[str, str, str, str, str], verdict: NodeVerdict) -> None:
        if verdict.status == "failed":
            return
        with transaction(self.db):  # the first verdict for a key stands: one arriving twice is written once
            self.db.execute(
                "INSERT OR IGNORE INTO evaluations VALUES (?,?,?,?,?,?,?,?)",
                (key, *parts, verdict.model_dump_json(), time.time()),
            )

    def __len__(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])
