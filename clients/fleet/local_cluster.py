"""A real Ray cluster on one box, inside a private network and PID namespace (tests, benchmarks, trials).

Outside a namespace Ray binds the machine's non-loopback address and its processes outlive a crash, so
this refuses to start unless the process sees no network interface but `lo`. Run it as

    unshare --net --pid --fork --mount-proc  python -m maxkernel.clients.fleet.local_cluster \
        --workers 2 -- maxkernel-orchestrate suite --engine ray --reference 12p ...

(`--unshare` re-executes itself that way). The head evaluates nothing (`--num-cpus 0`); each worker
node is its own `ray start --block` process, in its own session, with its CPUs, its custom resources
and its environment (`MAXKERNEL_HOST` names it in verdicts). `kill_worker(i)` SIGKILLs one node's
process tree, by PID, as a lost host; every Ray process dies with the namespace's first process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PORT = 6379
ADDRESS = f"127.0.0.1:{PORT}"
UNSHARE = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]


class NotInNamespace(RuntimeError):
    """Refused: Ray would bind a real interface. Run under `unshare --net --pid --fork --mount-proc`."""


def interfaces() -> list[str]:
    """The network interfaces of this process's network namespace (/proc/net/dev follows the netns)."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return [ln.split(":", 1)[0].strip() for ln in lines if ":" in ln]


def in_private_namespace() -> bool:
    return interfaces() == ["lo"]


def bring_up_loopback() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc's parent links), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(0), []):
            out.append(c)
            todo.append(c)
    return out


@dataclass
class Worker:
    name: str
    cpus: int = 1
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None


class LocalCluster:
    """Head + worker nodes as `ray start --block` children of this process (inside the namespace)."""

    def __init__(
        self, workers: list[Worker], *, temp_dir: str | None = None, env: Mapping[str, str] = ()
    ) -> None:
        if not in_private_namespace():
            raise NotInNamespace(
                f"interfaces {interfaces()}: start a local Ray cluster only under "
                f"`{' '.join(UNSHARE)}` (Ray would bind this machine's address)"
            )
        self.workers = workers
        self.temp_dir = temp_dir or "/tmp/maxkernel-ray"
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **dict(env)}
        self.head: subprocess.Popen | None = None
        self.logs = Path(self.temp_dir) / "logs-maxkernel"
        self.started_s: float | None = None

    @staticmethod
    def ray_bin() -> str:
        here = Path(sys.executable).parent / "ray"
        return str(here) if here.exists() else (shutil.which("ray") or "ray")

    def _start(self, argv: list[str], log: str, env: Mapping[str, str]) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        out = open(self.logs / log, "ab")  # noqa: SIM115 - the child keeps it
        return subprocess.Popen(
            [self.ray_bin(), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )

    def start(self, timeout_s: float = 120.0) -> LocalCluster:
        t0 = time.monotonic()
        bring_up_loopback()
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"]
        self.head = self._start(
            [
                "start",
                "--head",
                f"--port={PORT}",
                "--num-cpus=0",
                "--include-dashboard=false",
                f"--temp-dir={self.temp_dir}",
                *common,
            ],
            "head.log",
            self.env,
        )
        self._wait_for(1, timeout_s)
        for i, w in enumerate(self.workers):  # one at a time: on a loaded box a raylet may miss Ray's 30 s
            for _ in range(3):
                self.add(w)
                if self._wait_for(2 + i, timeout_s, w):
                    break
            else:
                raise TimeoutError(f"worker node {w.name} did not join in 3 tries: see {self.logs}")
        self.started_s = round(time.monotonic() - t0, 2)
        return self

    def add(self, w: Worker) -> None:
        """Join one worker node (a host) to the running head."""
        argv = ["start", f"--address={ADDRESS}", f"--num-cpus={w.cpus}", "--num-gpus=0"]
        if w.resources:
            argv.append(f"--resources={json.dumps(w.resources)}")
        env = {**self.env, "MAXKERNEL_HOST": w.name, **w.env}
        w.proc = self._start(
            [*argv, "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block"], f"{w.name}.log", env
        )

    def _wait_for(self, nodes: int, timeout_s: float, joining: Worker | None = None) -> bool:
        """Until `nodes` nodes are alive (asked through `ray` in a short child: this process stays no driver)."""
        probe = (
            "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            r = subprocess.run(
                [sys.executable, "-c", probe, ADDRESS],
                capture_output=True,
                text=True,
                env=self.env,
                timeout=60,
            )
            if (
                r.returncode == 0
                and r.stdout.strip().splitlines()[-1:]
                and int(r.stdout.split()[-1]) >= nodes
            ):
                return True
            if joining is not None and joining.proc is not None and joining.proc.poll() is not None:
                return False  # its `ray start` gave up: the caller starts it again
            time.sleep(0.5)
        raise TimeoutError(
            f"the local Ray cluster did not reach {nodes} nodes in {timeout_s:.0f}s: see {self.logs}"
        )

    def kill_worker(self, name: str) -> float:
        """SIGKILL one worker node as a lost host: its `ray start`, raylet and every Ray worker under it
        (Ray puts workers in their own sessions, so the tree is walked by PID); returns when."""
        w = next(w for w in self.workers if w.name == name)
        assert w.proc is not None
        tree = descendants(w.proc.pid)
        for pid in [w.proc.pid, *tree]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        at = time.time()
        w.proc.wait(timeout=30)
        return at

    def stop(self) -> None:
        """Kill what this cluster started, by PID (the namespace takes any stray child with it)."""
        for p in [w.proc for w in self.workers] + [self.head]:
            if p is not None and p.poll() is None:
                for pid in [p.pid, *descendants(p.pid)]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                p.wait(timeout=30)

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m maxkernel.clients.fleet.local_cluster", description=__doc__)
    p.add_argument("--workers", type=int, default=2, help="worker nodes (hosts), each with --cpus CPUs")
    p.add_argument("--cpus", type=int, default=1)
    p.add_argument("--resources", default="{}", help="custom resources of every worker node, JSON")
    p.add_argument("--unshare", action="store_true", help="re-run this command in a private namespace")
    p.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- COMMAND run against the cluster (RAY_ADDRESS set)"
    )
    args = p.parse_args(argv)
    if args.unshare:
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--unshare"]
        return subprocess.call(
            [*UNSHARE, sys.executable, "-m", "maxkernel.clients.fleet.local_cluster", *rest]
        )
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    workers = [
        Worker(f"host-{i + 1}", cpus=args.cpus, resources=json.loads(args.resources))
        for i in range(args.workers)
    ]
    try:
        with LocalCluster(workers) as cluster:
            print(f"local Ray cluster up in {cluster.started_s}s at {ADDRESS}", file=sys.stderr)
            if not command:
                return 0
            return subprocess.call(command, env={**cluster.env, "RAY_ADDRESS": ADDRESS})
    except NotInNamespace as e:
        print(f"local_cluster: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
