"""Where `maxkernel validate`'s time goes (issue 58): a kernel of each kind validated cold (a fresh
`maxkernel validate --json` process: pool, forkserver and jax start-up included) and, with --warm, warm
(a second validate through one worker pool kept running, as a server holds it). Prints each verdict's
phases (judge/phases.py): the jobs, per size, and the steps inside them.

    .venv/bin/python benchmarks/validate_latency.py [--case gemm --case rmsnorm] [--seeds 3] [--warm]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "kernels" / "corpus"
# name -> (kernel, reference): the README's example GEMM, an LLM-style RMSNorm from the test corpus, and
# JaxBench's own GEMM (its target needs a grown size: minutes on 2 cores)
CASES = {
    "gemm": (ROOT / "examples" / "matmul_kernel.py", ROOT / "examples" / "matmul_reference.py"),
    "rmsnorm": (CORPUS / "llm_rmsnorm.py", CORPUS / "rmsnorm_reference.py"),
    "gemm_8p": (ROOT / "jaxbench" / "tasks" / "8p_GEMM" / "pallas_reference.py", "8p"),
}
DEFAULT_CASES = ["gemm", "rmsnorm"]


def cold(kernel: Path, reference: str | Path, seeds: int, target: str) -> tuple[float, dict]:
    """(wall seconds, the verdict) of one fresh `maxkernel validate --json` process."""
    entry = Path(sys.executable).parent / "maxkernel"
    args = [str(entry), "validate", str(kernel), "-r", str(reference), "-t", target]
    args += ["--seeds", str(seeds), "--seed-offset", "0", "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1, 3):
        raise SystemExit(f"validate exited {p.returncode}: {p.stderr[-2000:]}")
    return wall, json.loads(p.stdout)


def warm(kernel: Path, reference: str | Path, seeds: int, target: str) -> tuple[float, dict]:
    """(wall seconds, the verdict) of a second validate through one running pool (the first warms it)."""
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    with WorkerPool(max_workers=2) as pool:
        ev = Evaluator(pool)
        ev.validate(str(kernel), str(reference), target, seeds=seeds, seed_offset=0)
        t0 = time.perf_counter()
        report = ev.validate(str(kernel), str(reference), target, seeds=seeds, seed_offset=0)
        return time.perf_counter() - t0, report.model_dump(mode="json")


def show(label: str, wall: float, verdict: dict) -> None:
    failure = verdict.get("failure") or {}
    said = "ok" if verdict.get("ok") else failure.get("kind", "?")
    print(f"\n== {label}: {wall:.1f} s wall ({said}; the verdict's own wall {verdict.get('wall_time_s')} s)")
    phases = verdict.get("phases") or []
    whole = [p for p in phases if not p["step"]]
    print(f"  {'job':<15} {'size':<18} {'seconds':>8}")
    for p in whole:
        print(f"  {p['job']:<15} {str(p['size']):<18} {p['seconds']:8.2f}")
    print(f"  {'(sum of jobs)':<34}{sum(p['seconds'] for p in whole):8.2f}")
    steps: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p in phases:
        if p["step"]:
            steps[(p["job"], p["step"])].append(p["seconds"])
    print(f"  {'job / step, every size':<38} {'n':>3} {'seconds':>8}")
    for (job, step), secs in sorted(steps.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {job + ' / ' + step:<38} {len(secs):>3} {sum(secs):8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", choices=sorted(CASES), help=f"default: {DEFAULT_CASES}")
    ap.add_argument("--seeds", type=int, default=3, help="as validate's --seeds (default: 3, its default)")
    ap.add_argument("--target", default="tpu-v6e")
    ap.add_argument("--warm", action="store_true", help="also time a validate through a running pool")
    args = ap.parse_args()
    for name in args.case or DEFAULT_CASES:
        kernel, reference = CASES[name]
        wall, verdict = cold(kernel, reference, args.seeds, args.target)
        show(f"{name} cold (CLI)", wall, verdict)
        if args.warm:
            wall, verdict = warm(kernel, reference, args.seeds, args.target)
            show(f"{name} warm (one pool)", wall, verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
