"""The same offline suite locally without Ray, on 1 and on 2 local Ray worker nodes; and what Ray adds per call.

    python benchmarks/fleet_scaling.py [--tasks 12p,41k] [--calls 40] [--overhead-only]

Re-runs itself as the first process of a private network + PID namespace (`unshare --net --pid --fork
--mount-proc`): Ray binds 127.0.0.1 only and every Ray process dies with the namespace. Each worker node
has 1 CPU (one evaluation at a time), so 2 nodes can at best halve the wall time; the local run uses
`--concurrency 1`, as one node does. Per-call overhead: round trips of a cheap tool (`list_chips`,
nothing evaluated) through Ray to a warm host, alternating with the same call to a warm in-memory server
in this process; the median paired difference is Ray's scheduling and transport, per evaluation.
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


def call_overhead_ms(calls: int) -> tuple[list[float], list[float]]:
    """Round trips of `list_chips`, alternating: through Ray to a warm host, and to a warm in-memory server
    in this process (the path a host runs inside its Ray task). Alternating keeps the box's load drift
    out of the difference."""
    from mcp import Client

    from maxkernel.clients.fleet.ray_engine import RayEngine
    from maxkernel.server.app import build_server

    async def go() -> tuple[list[float], list[float]]:
        ray_ms, local_ms = [], []
        with RayEngine(ADDRESS, concurrency=1) as engine:
            async with Client(build_server(tempfile.mkdtemp(prefix="fleet-bench-"), max_workers=1)) as c:
                await engine.call("list_chips", {})  # warm: the host's server is built on its first call
                await c.call_tool("list_chips", {})
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await engine.call("list_chips", {})
                    t1 = time.perf_counter()
                    await c.call_tool("list_chips", {})
                    t2 = time.perf_counter()
                    ray_ms.append((t1 - t0) * 1000)
                    local_ms.append((t2 - t1) * 1000)
        return ray_ms, local_ms

    return asyncio.run(go())


def report_overhead(ray_ms: list[float], local_ms: list[float]) -> None:
    diffs = sorted(r - loc for r, loc in zip(ray_ms, local_ms, strict=True))
    print(
        f"per-call overhead (list_chips, warm, {len(diffs)} alternating calls): Ray "
        f"{statistics.median(ray_ms):.1f} ms, in-memory server {statistics.median(local_ms):.1f} ms -> Ray adds "
        f"{statistics.median(diffs):.1f} ms per evaluation (median of paired differences; IQR "
        f"{diffs[len(diffs) // 4]:.1f}..{diffs[3 * len(diffs) // 4]:.1f} ms)"
    )


def inside(args: argparse.Namespace) -> int:
    out = Path(tempfile.mkdtemp(prefix="fleet-scaling-"))
    if args.overhead_only:
        with LocalCluster([Worker("host-1")], temp_dir=str(out / "ray1")):
            report_overhead(*call_overhead_ms(args.calls))
        return 0
    env_path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    os.environ["PATH"] = env_path
    walls: dict[str, float] = {}
    walls["local (no Ray)"] = suite(args.tasks, out / "local", [], 1)
    ray = ["--engine", "ray", "--ray-address", ADDRESS]
    with LocalCluster([Worker("host-1")], temp_dir=str(out / "ray1")) as c1:
        walls["Ray, 1 worker node"] = suite(args.tasks, out / "ray1-suite", ray, 2)
        start1 = c1.started_s
        ray_ms, local_ms = call_overhead_ms(args.calls)
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
    report_overhead(ray_ms, local_ms)
    print(
        f"cluster start (head + nodes, not in the walls): {start1:.1f} s with 1 node, {start2:.1f} s with 2"
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="12p,41k", help="JaxBench ids of the suite")
    p.add_argument("--calls", type=int, default=40, help="round trips for the per-call overhead")
    p.add_argument("--overhead-only", action="store_true", help="only the per-call overhead (one node)")
    args = p.parse_args()
    if in_private_namespace():
        return inside(args)
    return subprocess.call([*UNSHARE, sys.executable, __file__, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
