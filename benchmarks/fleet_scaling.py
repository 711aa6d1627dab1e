"""The same offline suite locally without Ray, on 1 and on 2 local Ray worker nodes; and what Ray adds per call.

    python benchmarks/fleet_scaling.py [--tasks 12p,41k] [--calls 20]

Re-runs itself as the first process of a private network + PID namespace (`unshare --net --pid --fork
--mount-proc`): Ray binds 127.0.0.1 only and every Ray process dies with the namespace. Each worker node
has 1 CPU (one evaluation at a time), so 2 nodes can at best halve the wall time; the local run uses
`--concurrency 1`, as one node does. Per-call overhead: the median round trip of a cheap tool
(`list_chips`, nothing evaluated) through Ray to a warm host, minus the same call to a warm in-memory
server in this process: Ray's scheduling and transport, per evaluation.
Prints the wall times side by side, as ratios to the local run. Numbers are this box's, under its load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from maxkernel.clients.fleet.local_cluster import ADDRESS, UNSHARE, LocalCluster, Worker, in_private_namespace

ORCH = [sys.executable, "-m", "maxkernel.clients.cli"]


def suite(tasks: str, run_dir: Path, extra: list[str], concurrency: int) -> float:
    argv = [*ORCH, "suite", "--reference", tasks, "--mode", "auto", "--model", "offline", "--test-cases", "0"]
    argv += ["--seeds", "1", "--verify-seeds", "1", "--concurrency", str(concurrency), "--quiet", "--json"]
    t0 = time.monotonic()
    r = subprocess.run([*argv, "--run-dir", str(run_dir), *extra], capture_output=True, text=True)
    took = time.monotonic() - t0
    rows = json.loads(r.stdout)["rows"] if r.stdout.startswith("{") else []
    if not rows or not all(row["status"] == "done" for row in rows):
        raise SystemExit(f"suite failed ({r.returncode}): {r.stderr[-2000:]}")
    return took


def ray_call_ms(calls: int) -> list[float]:
    from maxkernel.clients.fleet.ray_engine import RayEngine

    async def go() -> list[float]:
        out = []
        with RayEngine(ADDRESS, concurrency=1) as engine:
            await engine.call("list_chips", {})  # warm: the host's server is built on its first call
            for _ in range(calls):
                t0 = time.perf_counter()
                await engine.call("list_chips", {})
                out.append((time.perf_counter() - t0) * 1000)
        return out

    return asyncio.run(go())


def local_call_ms(calls: int) -> list[float]:
    from mcp import Client

    from maxkernel.server.app import build_server

    async def go() -> list[float]:
        out = []
        async with Client(build_server(tempfile.mkdtemp(prefix="fleet-bench-"), max_workers=1)) as c:
            await c.call_tool("list_chips", {})
            for _ in range(calls):
                t0 = time.perf_counter()
                await c.call_tool("list_chips", {})
                out.append((time.perf_counter() - t0) * 1000)
        return out

    return asyncio.run(go())


def inside(args: argparse.Namespace) -> int:
    out = Path(tempfile.mkdtemp(prefix="fleet-scaling-"))
    env_path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    os.environ["PATH"] = env_path
    walls: dict[str, float] = {}
    walls["local (no Ray)"] = suite(args.tasks, out / "local", [], 1)
    ray = ["--engine", "ray", "--ray-address", ADDRESS]
    with LocalCluster([Worker("host-1")], temp_dir=str(out / "ray1")) as c1:
        walls["Ray, 1 worker node"] = suite(args.tasks, out / "ray1-suite", ray, 2)
        start1 = c1.started_s
        over_ray = ray_call_ms(args.calls)
    over_local = local_call_ms(args.calls)
    with LocalCluster([Worker("host-1"), Worker("host-2")], temp_dir=str(out / "ray2")) as c2:
        walls["Ray, 2 worker nodes"] = suite(args.tasks, out / "ray2-suite", ray, 2)
        start2 = c2.started_s
    base = walls["local (no Ray)"]
    print(f"offline suite {args.tasks} (auto, 0 tester cases, 1 seed, 1 verify seed), 1 CPU per worker node")
    print(f"{'engine':<22}{'wall s':>9}{'vs local':>10}")
    for name, w in walls.items():
        print(f"{name:<22}{w:>9.1f}{w / base:>9.2f}x")
    speed = walls["Ray, 1 worker node"] / walls["Ray, 2 worker nodes"]
    print(f"2 nodes vs 1 node: {speed:.2f}x faster (at most 2x: one evaluation per node)")
    r_med, l_med = statistics.median(over_ray), statistics.median(over_local)
    print(
        f"per-call overhead (list_chips, warm, {args.calls} calls): Ray {r_med:.1f} ms, in-memory server "
        f"{l_med:.1f} ms -> Ray adds {r_med - l_med:.1f} ms per evaluation"
    )
    print(
        f"cluster start (head + nodes, not in the walls): {start1:.1f} s with 1 node, {start2:.1f} s with 2"
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="12p,41k", help="JaxBench ids of the suite")
    p.add_argument("--calls", type=int, default=20, help="round trips for the per-call overhead")
    args = p.parse_args()
    if in_private_namespace():
        return inside(args)
    return subprocess.call([*UNSHARE, sys.executable, __file__, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
