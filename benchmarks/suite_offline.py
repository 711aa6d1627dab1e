"""The offline suite over all 50 JaxBench tasks (tpu-v6e, estimate tier, at --size: the production size
`full` by default, validated at the check sizes), killed halfway.

Runs `maxkernel-orchestrate suite --mode auto --model offline` as a subprocess, waits until half the
tasks are finished, kills its whole process group with SIGKILL (the stdio server too), then continues
it with `--resume`. Printed: wall time of each part, tasks correct, fast_1 / fast_1.2 and the geomean
(estimate tier: the static model, not a measurement), how many tasks match or beat the expert Pallas
reference, and what the resume kept: finished tasks never run twice, the ones in flight run again
from their journals.
Run: .venv/bin/python benchmarks/suite_offline.py [--out runs/suite-offline] [--tasks all] [--size full]
[--no-kill]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ORCH = [sys.executable, "-m", "maxkernel.clients.cli"]


def done_count(suite_dir: Path) -> int:
    db_path = suite_dir / "suite.sqlite"
    if not db_path.is_file():
        return 0
    try:
        with sqlite3.connect(db_path, timeout=30) as db:
            return db.execute("SELECT COUNT(*) FROM tasks WHERE status IN ('done','failed')").fetchone()[0]
    except sqlite3.Error:
        return 0


def task_table(suite_dir: Path) -> dict[str, tuple[str, int, float | None]]:
    with sqlite3.connect(suite_dir / "suite.sqlite", timeout=30) as db:
        return {
            r[0]: (r[1], r[2], r[3])
            for r in db.execute("SELECT task, status, attempts, finished_at FROM tasks")
        }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=f"runs/suite-offline-{time.strftime('%Y%m%d-%H%M%S')}")
    p.add_argument("--tasks", default="all")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--size", default="full", help="the target size: scored there, validated at check sizes")
    p.add_argument("--no-kill", action="store_true", help="one uninterrupted run")
    a = p.parse_args()
    suite_dir = Path(a.out)
    argv = ORCH + [
        "suite",
        "--reference",
        a.tasks,
        "--mode",
        "auto",
        "--model",
        "offline",
        "--target",
        "tpu-v6e",
    ]
    argv += ["--size", a.size, "--concurrency", str(a.concurrency), "--iterations", "1", "--test-cases", "1"]
    argv += ["--seeds", "2", "--verify-seeds", "2", "--quiet", "--json"]
    from maxkernel.jaxbench import registry

    total = len(registry.list_task_ids()) if a.tasks == "all" else len(a.tasks.split(","))
    started = time.monotonic()
    first = subprocess.Popen(
        argv + ["--run-dir", str(suite_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    killed_at = None
    if not a.no_kill:
        while first.poll() is None and done_count(suite_dir) < total // 2:
            time.sleep(2.0)
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            killed_at = time.monotonic() - started
    out, _ = first.communicate()
    part1_s = time.monotonic() - started
    before = task_table(suite_dir)
    finished_before = {t for t, (s, _, _) in before.items() if s in ("done", "failed")}
    resumed_s = 0.0
    if killed_at is not None:
        t0 = time.monotonic()
        out = subprocess.run(
            ORCH + ["suite", "--resume", str(suite_dir), "--json", "--quiet"],
            capture_output=True,
            check=False,
        ).stdout
        resumed_s = time.monotonic() - t0
    result = json.loads(out)
    after = task_table(suite_dir)
    repeated = [t for t in finished_before if after[t][1] != before[t][1] or after[t][2] != before[t][2]]
    sc = result["score"]
    est = sc["by_tier"].get("estimate") or {}
    print(f"suite: {suite_dir}  tasks {sc['tasks']}  target tpu-v6e  size {a.size}  model offline")
    if killed_at is not None:
        print(
            f"first run: killed with SIGKILL at {killed_at:.0f} s with {len(finished_before)} tasks finished; "
            f"resume: {resumed_s:.0f} s; finished tasks run again: {len(repeated)} {repeated or ''}; "
            f"tasks re-queued from their journals: {result['requeued_on_start']}"
        )
    print(f"wall time: {part1_s + resumed_s:.0f} s in all")
    print(f"correct: {sc['correct']}/{sc['tasks']} ({100 * sc['fraction_correct']:.0f}%)")
    if est:
        print(
            f"estimate tier (static model, not measured): fast_1 {est['fast_1']:.2f}  fast_1.2 {est['fast_1_2']:.2f}  "
            f"geomean {est['geomean_speedup']}x over {est['rows']} correct tasks"
        )
    print(
        f"vs expert Pallas reference: {sc['match_or_beat_expert']}/{sc['with_expert']} match or beat (>= 0.95x), "
        f"{sc['beat_expert']} beat"
    )
    print("ranked: " + ", ".join(f"{r['task']} {r['speedup_vs_baseline']:.2f}x" for r in sc["ranked"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
