"""The suite's SQLite table: one row per task (status, best kernel hash, verdicts, spend).

`SUITE_DIR/suite.sqlite` in WAL mode, one transaction per change, numbered migrations (the search
store's `connect`). A task left `running` by a killed process goes back to `pending` on open, and
keeps its own run directory (`SUITE_DIR/tasks/<id>/`), so `--resume` continues it from its journal;
a `done` or `failed` task is never run again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from maxkernel.clients.search.store import connect, transaction
from maxkernel.tpu_tools.profile.scoreboard import TaskRow

SUITE_FILE = "suite.sqlite"
FINISHED = ("done", "failed")

_MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_initial",
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE tasks (
            task TEXT PRIMARY KEY,
            position INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending','running','done','failed','skipped')),
            attempts INTEGER NOT NULL DEFAULT 0,
            best_kernel_sha256 TEXT,
            correct INTEGER,
            verdicts TEXT,
            row TEXT,
            spend_usd REAL NOT NULL DEFAULT 0,
            evaluations INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            finished_at REAL
        );
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL,
            task TEXT, data TEXT
        );
        """,
    ),
]


class SuiteStore:
    def __init__(self, suite_dir: str | Path, *, requeue: bool = True) -> None:
        """requeue=False for readers that must not touch a suite another process may be running."""
        self.root = Path(suite_dir)
        self.path = self.root / SUITE_FILE
        self.db = connect(self.path, _MIGRATIONS)
        self.requeued = self._requeue_running() if requeue else 0

    @classmethod
    def exists(cls, suite_dir: str | Path) -> bool:
        return (Path(suite_dir) / SUITE_FILE).is_file()

    def close(self) -> None:
        self.db.close()

    def task_dir(self, task: str) -> Path:
        return self.root / "tasks" / task

    def _requeue_running(self) -> int:
        with transaction(self.db):
            n = self.db.execute("UPDATE tasks SET status='pending' WHERE status='running'").rowcount
            if n:
                self._event("requeued", None, {"count": n})
        return n

    def _event(self, kind: str, task: str | None, data: dict[str, Any] | None = None) -> None:
        self.db.execute(
            "INSERT INTO events (at, kind, task, data) VALUES (?, ?, ?, ?)",
            (time.time(), kind, task, json.dumps(data) if data is not None else None),
        )

    def set_meta(self, key: str, value: Any) -> None:
        with transaction(self.db):
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str) -> Any:
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(r[0]) if r else None

    def add_tasks(self, tasks: list[str]) -> None:
        with transaction(self.db):
            for i, t in enumerate(tasks):
                self.db.execute(
                    "INSERT OR IGNORE INTO tasks (task, position, status) VALUES (?, ?, 'pending')", (t, i)
                )

    def start(self, task: str) -> None:
        with transaction(self.db):
            self.db.execute(
                "UPDATE tasks SET status='running', attempts=attempts+1, started_at=? WHERE task=?",
                (time.time(), task),
            )
            self._event("started", task)

    def finish(self, row: TaskRow, verdicts: dict[str, Any]) -> None:
        status = row.status if row.status in FINISHED + ("skipped",) else "failed"
        before = self.db.total_changes
        with transaction(self.db):
            self.db.execute(
                "UPDATE tasks SET status=?, best_kernel_sha256=?, correct=?, verdicts=?, row=?, spend_usd=?, "
                "evaluations=?, finished_at=? WHERE task=? AND status NOT IN ('done','failed')",
                (
                    status,
                    row.kernel_sha256,
                    int(row.correct),
                    json.dumps(verdicts, default=str),
                    row.model_dump_json(),
                    row.spend_usd,
                    row.evaluations,
                    time.time(),
                    row.task,
                ),
            )
            if self.db.total_changes == before:  # already finished: the first row stands
                return
            self._event("finished", row.task, {"status": status, "correct": row.correct})

    def release(self, task: str, reason: str) -> None:
        """Back to pending (its server died, or the suite stopped before it ran): a resume picks it up."""
        with transaction(self.db):
            self.db.execute("UPDATE tasks SET status='pending' WHERE task=? AND status='running'", (task,))
            self._event("released", task, {"reason": reason})

    def statuses(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.db.execute("SELECT task, status FROM tasks ORDER BY position")}

    def pending(self) -> list[str]:
        return [
            r[0] for r in self.db.execute("SELECT task FROM tasks WHERE status='pending' ORDER BY position")
        ]

    def rows(self) -> list[TaskRow]:
        out = []
        for r in self.db.execute("SELECT task, status, row, attempts FROM tasks ORDER BY position"):
            if r["row"]:
                out.append(TaskRow.model_validate_json(r["row"]))
            else:
                out.append(TaskRow(task=r["task"], status=r["status"]))
        return out

    def spend_usd(self) -> float:
        return float(self.db.execute("SELECT COALESCE(SUM(spend_usd), 0) FROM tasks").fetchone()[0])

    def evaluations(self) -> int:
        return int(self.db.execute("SELECT COALESCE(SUM(evaluations), 0) FROM tasks").fetchone()[0])

    def attempts(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.db.execute("SELECT task, attempts FROM tasks")}

    def events(self) -> list[dict[str, Any]]:
        return [
            {"kind": r["kind"], "task": r["task"], "data": json.loads(r["data"]) if r["data"] else None}
            for r in self.db.execute("SELECT * FROM events ORDER BY seq")
        ]
