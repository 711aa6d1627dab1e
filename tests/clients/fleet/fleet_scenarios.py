"""The fleet scenarios, run as the first process of a private network + PID namespace (never outside one).

    unshare --net --pid --fork --mount-proc python tests/clients/fleet/fleet_scenarios.py OUT_DIR

Starts a real Ray cluster (a head evaluating nothing, two worker nodes `host-1`, `host-2`, each 1 CPU and
a custom resource standing for its host kind), then:
1. a 3-task offline suite over it; `host-2` is SIGKILLed (its process group, by PID) as soon as it has
   started its first kernel evaluation;
2. a search that asks to profile on a chip kind no host has (must fail at once, one line);
3. a search over the same cluster, the orchestrator kill -9'd once a node has finished, then resumed;
4. the same 3-task suite run locally without Ray, for the rows to compare.
Writes OUT_DIR/result.json with everything the test asserts on (the hosts' trace, rows, timings).
Everything Ray started dies with this process (it is the namespace's init).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from maxkernel.clients.fleet.local_cluster import ADDRESS, LocalCluster, Worker
from maxkernel.clients.search.store import GRAPH_FILE

TASKS = "12p,41k,8p"
HOST_KIND = {"accelerator_type:TPU-V4": 1}  # stands for the host kind: a v4 host, never a v6e one
ORCH = [sys.executable, "-m", "maxkernel.clients.cli"]
SUITE_FLAGS = [
    "--reference",
    TASKS,
    "--mode",
    "auto",
    "--model",
    "offline",
    "--test-cases",
    "0",
    "--seeds",
    "1",
]
SUITE_FLAGS += ["--verify-seeds", "1", "--concurrency", "2", "--json", "--quiet"]
RAY = ["--engine", "ray", "--ray-address", ADDRESS]


def trace_lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def run(argv: list[str], env: dict, timeout: float = 900) -> dict:
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    return {
        "rc": r.returncode,
        "stdout": r.stdout,
        "stderr": r.stderr[-4000:],
        "seconds": time.monotonic() - t0,
    }


def suite_with_a_host_lost(cluster: LocalCluster, out: Path, trace: Path, env: dict) -> dict:
    run_dir = out / "suite-ray"
    t0 = time.time()
    proc = subprocess.Popen(
        [*ORCH, "suite", *RAY, *SUITE_FLAGS, "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    killed_at = None
    while proc.poll() is None and killed_at is None:
        started = [e for e in trace_lines(trace) if e["host"] == "host-2" and e["event"] == "start"]
        if any(e["tool"] == "evaluate_kernel" for e in started):
            killed_at = cluster.kill_worker("host-2")
        time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=1200)
    return {
        "rc": proc.returncode,
        "out": json.loads(stdout) if stdout.strip().startswith("{") else None,
        "stdout_head": stdout[:2000],
        "stderr": stderr[-4000:],
        "t0": t0,
        "killed_at": killed_at,
        "ended_at": time.time(),
        "attempts": dict(
            sqlite3.connect(run_dir / "suite.sqlite").execute("SELECT task, attempts FROM tasks")
        ),
    }


def chip_nobody_has(out: Path, env: dict) -> dict:
    run_dir = out / "search-chip"
    r = run([*ORCH, "search", *RAY, "--reference", "8p", "--target", "tpu-v6e", "--profile-on", "chip",
             "--run-dir", str(run_dir), "--quiet"], env, timeout=120)  # fmt: skip
    return r | {"run_dir_exists": run_dir.exists()}


def search_killed_and_resumed(out: Path, trace: Path, env: dict) -> dict:
    run_dir = out / "search-ray"
    argv = [*ORCH, "search", *RAY, "--reference", "8p", "--max-evaluations", "2", "--concurrency", "1"]
    argv += ["--run-dir", str(run_dir), "--quiet", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    finished_before: list[dict] = []
    killed_at = None
    while proc.poll() is None:
        db = run_dir / GRAPH_FILE
        if db.is_file():
            try:
                rows = (
                    sqlite3.connect(db)
                    .execute("SELECT id, source_hash, status FROM nodes WHERE status IN ('valid','invalid')")
                    .fetchall()
                )
            except sqlite3.Error:
                rows = []
            if rows:
                os.kill(proc.pid, signal.SIGKILL)
                killed_at = time.time()
                finished_before = [{"id": r[0], "source_hash": r[1], "status": r[2]} for r in rows]
                break
        time.sleep(0.2)
    proc.wait(timeout=60)
    killed = {"rc": proc.returncode, "killed_at": killed_at}
    resumed = run([*ORCH, "search", "--resume", str(run_dir), "--quiet", "--json"], env)
    nodes = (
        sqlite3.connect(run_dir / GRAPH_FILE)
        .execute("SELECT id, source_hash, status, attempts, cached, verdict FROM nodes")
        .fetchall()
    )
    return {
        "killed": killed,
        "finished_before": finished_before,
        "resumed": resumed
        | {"out": json.loads(resumed["stdout"]) if resumed["stdout"].startswith("{") else None},
        "nodes": [
            {
                "id": n[0],
                "source_hash": n[1],
                "status": n[2],
                "attempts": n[3],
                "cached": n[4],
                "server": json.loads(n[5]).get("server") if n[5] else None,
            }
            for n in nodes
        ],  # fmt: skip
    }


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "fleet-trace.jsonl"
    env = {**os.environ, "MAXKERNEL_FLEET_TRACE": str(trace), "RAY_USAGE_STATS_ENABLED": "0"}
    result: dict = {}
    workers = [Worker(name, cpus=1, resources=dict(HOST_KIND)) for name in ("host-1", "host-2")]
    t0 = time.monotonic()
    with LocalCluster(workers, temp_dir=str(out / "ray"), env=env) as cluster:
        result["cluster_start_s"] = cluster.started_s
        result["suite_ray"] = suite_with_a_host_lost(cluster, out, trace, env)
        save(out, result, "partial.json")
        result["chip"] = chip_nobody_has(out, env)
        result["search"] = search_killed_and_resumed(out, trace, env)
        result["trace"] = trace_lines(trace)
        save(out, result, "partial.json")
    local = run([*ORCH, "suite", *SUITE_FLAGS, "--run-dir", str(out / "suite-local")], env)
    result["suite_local"] = local | {"out": json.loads(local["stdout"]) if local["rc"] in (0, 1) else None}
    result["total_s"] = time.monotonic() - t0
    save(out, result, "result.json")
    return 0


def save(out: Path, result: dict, name: str) -> None:
    (out / name).write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
