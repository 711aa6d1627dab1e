"""JaxBench level 2 as published, end to end with default flags: per task, the baseline compiled at full, the
baseline validated against itself (Pallas reference interpreted at its derived check sizes), and the
baseline's static estimate at full.

    python benchmarks/level2.py DIR [--target tpu-v6e] [--only 8p,55p] [--timeout 900] [--out results.json]

DIR is a clone's `JAXBench/benchmark/level2` (or any folder of `<task>/baseline.py` files). Each step is the
`maxkernel` CLI as a user runs it (a subprocess, `--json`); a step's wall time is printed beside it. Nothing is
timed on a chip here: the estimate is labeled with its tier.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

MAXKERNEL = [sys.executable, "-m", "maxkernel.tpu_tools.cli.main"]


def run(args: list[str], timeout: float) -> tuple[dict | None, str, float]:
    """(the --json report, or None; the last stderr line or the reason; seconds)."""
    started = time.perf_counter()
    try:
        done = subprocess.run([*MAXKERNEL, *args, "--json"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g} s", time.perf_counter() - started
    took = time.perf_counter() - started
    try:
        return json.loads(done.stdout), "", took
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return None, tail[:300], took


def why(report: dict | None, note: str) -> str:
    if report is None:
        return note
    failure = report.get("failure") or {}
    return f"{failure.get('kind', '')}: {failure.get('summary', '')}"[:300]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--target", default="tpu-v6e")
    ap.add_argument("--only", default="", help="comma-separated task prefixes (8p,55p)")
    ap.add_argument("--timeout", type=float, default=900.0, help="per step, seconds")
    ap.add_argument("--steps", default="compile,validate,estimate")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    tasks = sorted(p.parent for p in a.folder.glob("*/baseline.py"))
    if a.only:
        wanted = tuple(f"{x}_" for x in a.only.split(","))
        tasks = [t for t in tasks if t.name.startswith(wanted)]
    steps = a.steps.split(",")
    rows = []
    for task in tasks:
        base = str(task / "baseline.py")
        common = ["--reference", base, "--target", a.target]
        row: dict = {"task": task.name}
        if "compile" in steps:
            r, note, s = run(["compile", base, *common, "--timeout", str(a.timeout)], a.timeout + 60)
            row["compile"] = {
                "ok": bool(r and r.get("ok")),
                "s": round(s, 1),
                "why": "" if r and r.get("ok") else why(r, note),
            }
        if "validate" in steps:
            r, note, s = run(["validate", base, *common, "--timeout", str(a.timeout)], a.timeout + 60)
            ok = bool(r and r.get("ok"))
            sizes = [c.get("name") for c in (r or {}).get("check_sizes", [])]
            row["validate"] = {"ok": ok, "s": round(s, 1), "sizes": sizes, "why": "" if ok else why(r, note)}
        if "estimate" in steps:
            r, note, s = run(["estimate", base, *common, "--timeout", str(a.timeout)], a.timeout + 60)
            est = (r or {}).get("estimate") or {}
            row["estimate"] = {
                "ok": bool(r and r.get("ok")),
                "s": round(s, 1),
                "us": est.get("estimated_time_us"),
                "tier": est.get("tier"),
                "why": "" if r and r.get("ok") else why(r, note),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    for step in steps:
        good = sum(1 for r in rows if r.get(step, {}).get("ok"))
        print(f"{step}: {good}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
