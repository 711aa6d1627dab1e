"""The offline suite over all 50 JaxBench tasks (estimate tier, at --size: the production size `full` by
default, validated at the check sizes), on --target (tpu-v6e by default), killed halfway.

Runs `maxkernel-orchestrate suite --mode auto --model offline` as a subprocess, waits until half the
tasks are finished, kills its whole process group with SIGKILL (the stdio server too), then continues
it with `--resume` (`--no-kill`: one uninterrupted run). Printed: wall time of each part, what the
resume kept (finished tasks never run twice, the ones in flight run again from their journals), then
the per-task table: correct, tier, kernel / XLA / expert time, x XLA and x expert (a ratio only where
both sides have one tier), each task's wall time; then correct, tasks >= 1x XLA and the geomean, tasks
>= 0.95x their expert Pallas reference, fast_1 / fast_1.2. Estimates are the static model, not measured.
Run: .venv/bin/python benchmarks/suite_offline.py [--out DIR] [--tasks all|id,id] [--size full]
[--target tpu-v6e] [--no-kill]; --report DIR prints a suite's table (of one not finished, its finished tasks) and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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


def _f(x: float | None, spec: str) -> str:
    """`x` formatted by `spec`; a missing value is a "-" of the same width."""
    width = int(re.match(r"\d*", spec).group() or 0)
    return ("-" if x is None else format(x, spec)).rjust(width)


def _score_doc(suite_dir: Path) -> dict:
    """score.json of a finished suite; of one still running (or killed), its finished tasks' rows."""
    if (suite_dir / "score.json").is_file():
        return json.loads((suite_dir / "score.json").read_text())
    from maxkernel.tpu_tools.profile.scoreboard import TaskRow, score

    with sqlite3.connect(suite_dir / "suite.sqlite", timeout=30) as db:
        found = db.execute("SELECT row, status FROM tasks ORDER BY position").fetchall()
    rows = [TaskRow.model_validate_json(r) for r, st in found if r and st in ("done", "failed")]
    print(f"(not finished: the {len(rows)} of {len(found)} tasks done so far)")
    return {"score": score(rows).model_dump(mode="json"), "rows": [r.model_dump(mode="json") for r in rows]}


def print_report(suite_dir: Path) -> None:
    """The per-task table (vs XLA and vs the expert, each only at one tier) and the issue's targets."""
    doc = _score_doc(suite_dir)
    rows = doc["rows"]
    print(
        f"{'task':<34} {'ok':<3} {'tier':<13} {'kernel us':>10} {'XLA us':>10} {'x XLA':>6} "
        f"{'expert us':>10} {'x expert':>8} {'wall s':>7}"
    )
    for r in rows:
        tier = (
            f"est/{r['estimate_tier']}"
            if r["tier"] == "estimate" and r["estimate_tier"]
            else r["tier"] or "-"
        )
        why = ""
        if not r["correct"] and r.get("failed"):
            why = f"  ({r['failed']['kind']} at {r['failed'].get('size') or '?'})"
        elif r.get("expert_time_us") and r.get("speedup_vs_expert") is None:
            why = f"  (expert at {r.get('expert_tier') or 'another tier'}: no ratio)"
        print(
            f"{r['task'][:34]:<34} {'yes' if r['correct'] else 'no':<3} {tier:<13} "
            f"{_f(r['kernel_time_us'], '10.1f')} {_f(r['baseline_time_us'], '10.1f')} "
            f"{_f(r['speedup_vs_baseline'], '6.2f')} {_f(r.get('expert_time_us'), '10.1f')} "
            f"{_f(r['speedup_vs_expert'], '8.2f')} {r['wall_time_s']:7.0f}{why}"
        )
    n = len(rows)
    correct = [r for r in rows if r["correct"]]
    vs_xla = [r["speedup_vs_baseline"] for r in correct if r["speedup_vs_baseline"]]
    geo = math.exp(sum(math.log(v) for v in vs_xla) / len(vs_xla)) if vs_xla else None
    experts = [r for r in rows if r.get("expert_time_us")]
    ratios = [r["speedup_vs_expert"] for r in correct if r["speedup_vs_expert"] is not None]
    tiers = sorted({r["tier"] for r in correct if r["tier"]})
    print(
        f"scores are {', '.join(tiers) or 'none'} (an estimate is the static model for the chip, not measured)"
    )
    print(f"correct: {len(correct)}/{n}")
    print(
        f"x XLA >= 1 (same tier): {sum(v >= 1.0 for v in vs_xla)}/{n}; geomean {_f(geo, '.3f')}x over {len(vs_xla)}"
    )
    print(
        f"x expert >= 0.95: {sum(v >= 0.95 for v in ratios)}/{len(experts)} tasks with an expert "
        f"({len(ratios)} correct with a same-tier ratio)"
    )
    for tier, t in doc["score"]["by_tier"].items():
        print(f"{tier}: fast_1 {t['fast_1']:.2f}  fast_1.2 {t['fast_1_2']:.2f} (over all {n} tasks)")
    print(f"per-task wall time: {sum(r['wall_time_s'] for r in rows):.0f} s summed over {n} tasks")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=f"runs/suite-offline-{time.strftime('%Y%m%d-%H%M%S')}")
    p.add_argument("--tasks", default="all")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--size", default="full", help="the target size: scored there, validated at check sizes")
    p.add_argument("--no-kill", action="store_true", help="one uninterrupted run")
    p.add_argument("--target", default="tpu-v6e", help="the chip scored for")
    p.add_argument(
        "--report",
        metavar="DIR",
        help="print the table of a suite dir (a running one: its finished tasks); run nothing",
    )
    a = p.parse_args()
    if a.report:
        if not (Path(a.report) / "score.json").is_file() and not (Path(a.report) / "suite.sqlite").is_file():
            p.error(f"--report {a.report}: no suite there (neither score.json nor suite.sqlite)")
        print_report(Path(a.report))
        return 0
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
        a.target,
    ]
    argv += ["--size", a.size, "--concurrency", str(a.concurrency), "--iterations", "1", "--test-cases", "1"]
    argv += ["--seeds", "2", "--verify-seeds", "2", "--quiet", "--json"]
    from maxkernel.jaxbench import registry

    total = len(registry.list_task_ids()) if a.tasks == "all" else len(a.tasks.split(","))
    started = time.monotonic()
    # the run's own stderr beside its folder (the folder must start empty): a refused start is read there
    err_path = suite_dir.with_name(suite_dir.name + ".stderr")
    err_path.parent.mkdir(parents=True, exist_ok=True)
    killed_at = None
    with err_path.open("w") as err:
        first = subprocess.Popen(
            argv + ["--run-dir", str(suite_dir)], stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
        if not a.no_kill:
            while first.poll() is None and done_count(suite_dir) < max(1, total // 2):
                time.sleep(2.0)
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                killed_at = time.monotonic() - started
        out, _ = first.communicate()
    part1_s = time.monotonic() - started
    if not (suite_dir / "suite.sqlite").is_file():
        lines = err_path.read_text(errors="replace").strip().splitlines()
        print(f"suite_offline: the suite did not start (exit {first.returncode}): {' '.join(lines[-3:])}")
        return 2
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
    print(f"suite: {suite_dir}  target {a.target}  size {a.size}  model offline")
    if killed_at is not None:
        print(
            f"first run: killed with SIGKILL at {killed_at:.0f} s with {len(finished_before)} tasks finished; "
            f"resume: {resumed_s:.0f} s; finished tasks run again: {len(repeated)} {repeated or ''}; "
            f"tasks re-queued from their journals: {result['requeued_on_start']}"
        )
    print(f"wall time: {part1_s + resumed_s:.0f} s in all")
    print_report(suite_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
