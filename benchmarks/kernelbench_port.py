"""`maxkernel port` over a folder of KernelBench-format problems: outcome, peak RSS, wall time, check size.

Each problem is ported in its own child (`maxkernel port SRC --out DIR/SRC_port.py --json`), as a user
runs it; the child's peak resident memory comes from wait4's rusage, so a port that outgrows the host
shows here before the OS kills it. The table gives, per problem: the outcome (matched, refused with its
one line, killed), the peak RSS, the wall time, and the size the seeds ran at (the source's own, or
the scaled size globals chosen to fit). The last line is the share that reached a matched port.

    python benchmarks/kernelbench_port.py tests/tpu_tools/port/kernelbench [--out DIR] [--only a,b]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _sizes_of(port: Path) -> dict:
    try:
        tree = ast.parse(port.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SIZES":
            return ast.literal_eval(node.value)
    return {}


def run_one(src: Path, out_dir: Path, seeds: int) -> dict:
    port = out_dir / f"{src.stem}_port.py"
    cmd = [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "port", str(src), "--out", str(port)]
    cmd += ["--seeds", str(seeds), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    rss_kb = _children_peak_kb()  # run_one runs in a fresh interpreter (_isolated): this child's peak
    row = {
        "problem": src.stem,
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_mb": rss_kb // 1024,
    }
    if proc.returncode < 0 or proc.returncode == 137:
        row |= {"outcome": "killed", "detail": f"signal {-proc.returncode}", "check": "-"}
        return row
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        last = (err.strip().splitlines() or ["no output"])[-1].removeprefix("maxkernel: ")
        row |= {"outcome": "refused", "detail": last, "check": "-"}
        return row
    check = report.get("check") or {}
    size = check.get("size") or "full"
    dims = _sizes_of(port).get(size, {})
    row |= {
        "outcome": "matched" if report.get("ok") else report.get("status", "refused"),
        "detail": "" if report.get("ok") else report.get("summary", "")[:160],
        "check": f"{size} {dims}" if dims else size,
        "path": report.get("port_path"),
    }
    return row


def _children_peak_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, help="where the ports go (default: a temporary folder)")
    ap.add_argument("--only", help="comma-separated problem stems")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    srcs = sorted(p for p in args.folder.glob("*.py") if not p.stem.endswith(("_port", "_source")))
    if args.only:
        keep = set(args.only.split(","))
        srcs = [p for p in srcs if p.stem in keep]
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="kb_port_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'problem':28} {'outcome':10} {'peak RSS':>9} {'wall':>7}  check size", flush=True)
    for src in srcs:
        row = _isolated(src, out_dir, args.seeds)
        rows.append(row)
        print(
            f"{row['problem']:28} {row['outcome']:10} {row['peak_rss_mb']:>6} MB {row['wall_s']:>6.1f}s  "
            f"{row['check']}" + (f"  ({row['detail']})" if row.get("detail") else ""),
            flush=True,
        )
    matched = sum(r["outcome"] == "matched" for r in rows)
    killed = sum(r["outcome"] == "killed" for r in rows)
    print(f"matched {matched}/{len(rows)} ({100 * matched / max(len(rows), 1):.0f}%), killed {killed}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


def _isolated(src: Path, out_dir: Path, seeds: int) -> dict:
    """run_one in a fresh interpreter, so RUSAGE_CHILDREN's maximum is this problem's child alone."""
    here, src_s, out_s = str(Path(__file__).parent), str(src), str(out_dir)
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); import kernelbench_port as k; "
        f"print(json.dumps(k.run_one(k.Path({src_s!r}), k.Path({out_s!r}), {seeds})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"problem": src.stem, "outcome": "error", "detail": tail, "rc": proc.returncode, "wall_s": 0.0,
                "peak_rss_mb": 0, "check": "-"}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
