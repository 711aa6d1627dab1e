"""How many references the offline model turns into a validated Pallas kernel, with no task id.

Not a test: prints a count. Each JaxBench task file is copied out to a temp dir (a directory task: its
`__init__.py`, as `<id>.py`), so the loader cannot know the task id, and `maxkernel-orchestrate auto
--reference <copy> --model offline` runs on it (the real CLI, its own stdio server); the references in
examples/ (a row softmax, a layernorm, a matmul + bias + gelu, the README's matmul) run the same way.
A reference counts as covered when the run ends with a best kernel: compiled for the target and
validated on fresh seeds by the server. Failures are grouped by reason (the run's stop reason or its
last iteration's outcome, cut to its kind).

Results go to one JSON file per reference under --out, so an interrupted run resumes where it stopped
(--redo forgets them); --shard I/N splits the list between processes.

    .venv/bin/python benchmarks/offline_coverage.py [--tasks 8p,12p] [--iterations 1] [--target cpu]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = (
    "examples/softmax_reference.py",
    "examples/layernorm_reference.py",
    "examples/matmul_bias_gelu_reference.py",
    "examples/matmul_reference.py",
)


def _task_file(task_id: str) -> Path:
    from maxkernel.jaxbench import registry

    path = registry.task_path(task_id)
    return path / "__init__.py" if path.is_dir() else path


def references(tasks: str | None, own: bool) -> list[tuple[str, Path]]:
    """(name, source file) of every reference to run, filtered by --tasks (ids, short ids or names)."""
    from maxkernel.jaxbench.registry import list_task_ids

    out = [(tid, _task_file(tid)) for tid in list_task_ids()]
    if own:
        out += [(Path(p).stem, ROOT / p) for p in OWN]
    if tasks:
        wanted = [w.strip() for w in tasks.split(",") if w.strip()]
        out = [
            (n, p)
            for n, p in out
            if any(n == w or n.split("_")[0] == w or (len(w) > 4 and w in n) for w in wanted)
        ]
    return out


BOILERPLATE = (
    r"Pallas encountered an internal verification error\. Please file a bug at \S+ Error details: ",
    r"Please file an issue at \S+",
    r"/tmp/\S+",
)


def reason(record: dict) -> str:
    """One short failure reason: 'no template fits (ops: ...)', else the last error of the last iteration."""
    stop = record.get("stop_reason") or ""
    if "no template fits" in stop:
        m = re.search(r"\(ops: ([^)]*)\)", stop)
        return f"no template fits (ops: {m.group(1)})" if m else stop[:120]
    text = record.get("outcome") or stop or record.get("stderr_tail") or "unknown"
    text = text.split("last error: ", 1)[-1]
    for pattern in BOILERPLATE:
        text = re.sub(pattern, "", text)
    return re.sub(r"\(candidate line \d+\)", "", text).strip()[:110]


def run_one(name: str, src: Path, args: argparse.Namespace, out_dir: Path) -> dict:
    """Copy `src` out, run the offline Auto loop on the copy, return the result record."""
    tmp = Path(tempfile.mkdtemp(prefix="maxkernel-coverage-"))
    try:
        ref = tmp / f"{name}.py"
        shutil.copyfile(src, ref)
        cmd = [
            str(Path(sys.executable).parent / "maxkernel-orchestrate"),
            "auto",
            "--reference",
            str(ref),
            "--model",
            "offline",
            "--target",
            args.target,
            "--iterations",
            str(args.iterations),
            "--no-profile",
            "--test-cases",
            "0",
            "--seeds",
            str(args.seeds),
            "--json",
            "--quiet",
            "--out",
            str(tmp / "runs"),
        ]
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, cwd=tmp)
        wall = time.perf_counter() - started
        try:
            summary = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            summary = None
        ok = bool(summary and summary.get("best"))
        its = (summary or {}).get("iterations") or []
        record = {
            "name": name,
            "ok": ok,
            "rc": proc.returncode,
            "wall_s": round(wall, 1),
            "target": args.target,
            "template": _template_of(tmp / "runs"),
            "stop_reason": summary.get("stop_reason") if summary else None,
            "outcome": its[-1]["outcome"] if its else None,
            "stderr_tail": None if summary else proc.stderr.strip()[-300:],
        }
    except subprocess.TimeoutExpired:
        record = {"name": name, "ok": False, "rc": None, "outcome": f"timeout after {args.timeout_s:.0f} s"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
    return record


def _template_of(runs: Path) -> str | None:
    """The offline template named by the run's last kernel (its offline-config marker)."""
    for k in sorted(runs.glob("*/iter-*/kernel.py"), reverse=True):
        m = re.search(r"offline-config: template=(\w+)", k.read_text())
        if m:
            return m.group(1)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", help="comma-separated task ids, short ids (8p) or name parts; default: all")
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument(
        "--target", default="cpu", help="auto's --target (default cpu; tpu-v6e compiles with Mosaic)"
    )
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--timeout-s", type=float, default=1200.0, help="per reference")
    p.add_argument("--out", default=None, help="results dir (default: .bench/offline_coverage-<target>)")
    p.add_argument("--shard", default="0/1", help="I/N: run every N-th reference starting at I")
    p.add_argument("--redo", action="store_true", help="ignore saved results")
    p.add_argument("--no-own", action="store_true", help="JaxBench tasks only")
    p.add_argument("--report-only", action="store_true", help="print the saved results, run nothing")
    args = p.parse_args(argv)
    out_dir = Path(args.out or ROOT / ".bench" / f"offline_coverage-{args.target}")
    out_dir.mkdir(parents=True, exist_ok=True)
    refs = references(args.tasks, own=not args.no_own)
    i, n = (int(x) for x in args.shard.split("/"))
    results = []
    for k, (name, src) in enumerate(refs):
        saved = out_dir / f"{name}.json"
        if saved.exists() and not args.redo:
            results.append(json.loads(saved.read_text()))
            continue
        if args.report_only or k % n != i:
            continue
        rec = run_one(name, src, args, out_dir)
        results.append(rec)
        status = "ok" if rec["ok"] else f"FAIL {reason(rec)}"
        print(
            f"{name:60s} {rec.get('template') or '-':12s} {rec.get('wall_s', '-')!s:>7s} s  {status}",
            flush=True,
        )
    tasks = [r for r in results if re.match(r"\d+[pk]_", r["name"])]
    own = [r for r in results if r not in tasks]
    print(f"\ntarget {args.target}, {args.iterations} iteration(s), references copied out (no task id)")
    print(f"JaxBench tasks validated: {sum(r['ok'] for r in tasks)} of {len(tasks)} run")
    if own:
        print(f"own references validated: {sum(r['ok'] for r in own)} of {len(own)}")
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for r in results:
        if not r["ok"]:
            groups[reason(r)].append(r["name"])
    if groups:
        print("failures by reason:")
        for why, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(names):2d}  {why}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
