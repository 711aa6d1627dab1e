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

`--size full` adds a column: the best kernel compiled (compile-only, for tpu-v6e) at the reference's
production size, the shape the kernel is for. `--first-kernel` skips the Auto loop: the offline
model's first kernel (planner + implementer on the traced program, in-process) is validated at `small`
(interpret), compiled for tpu-v6e at `small` and at `--size`, and with `--larger` validated at a size
between small and full that is not a multiple of small (each dim that changes grows by half, capped at
full; a case the reference cannot build is reported as unusable, not as the kernel's failure).

    .venv/bin/python benchmarks/offline_coverage.py [--tasks 8p,12p] [--iterations 1] [--target cpu]
    .venv/bin/python benchmarks/offline_coverage.py --first-kernel --size full --larger --no-own
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
        at_size = _compile_best(tmp / "runs", ref, args) if ok and args.size else None
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
            "size": args.size,
            "compiles_at_size": at_size,
        }
    except subprocess.TimeoutExpired:
        record = {"name": name, "ok": False, "rc": None, "outcome": f"timeout after {args.timeout_s:.0f} s"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
    return record


def _compile_best(runs: Path, ref: Path, args: argparse.Namespace) -> str:
    """'ok', or the failure kind, of `maxkernel compile best_kernel.py --size SIZE --target tpu-v6e`."""
    best = next(iter(sorted(runs.glob("*/best_kernel.py"))), None)
    if best is None:
        return "no best_kernel.py"
    exe = str(Path(sys.executable).parent / "maxkernel")
    cmd = [
        exe,
        "compile",
        str(best),
        "--reference",
        str(ref),
        "--size",
        args.size,
        "--target",
        "tpu-v6e",
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, cwd=runs)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return f"rc {proc.returncode}: {proc.stderr.strip()[-120:]}"
    return "ok" if report.get("ok") else (report.get("failure") or {}).get("kind", "failed")


def _template_of(runs: Path) -> str | None:
    """The offline template named by the run's last kernel (its offline-config marker)."""
    for k in sorted(runs.glob("*/iter-*/kernel.py"), reverse=True):
        m = re.search(r"offline-config: template=(\w+)", k.read_text())
        if m:
            return m.group(1)
    return None


def larger_case(ref: Path) -> dict[str, int] | None:
    """Sizes between small and full, not multiples of small: each int dim that changes grows by half."""
    from maxkernel.tpu_tools.problem.reference import load_reference

    table = load_reference(str(ref)).sizes_table
    small, full = table.get("small"), table.get("full")
    if not small or not full:
        return None
    out = {}
    for k, v in small.items():
        w = full.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and isinstance(w, int) and w != v:
            out[k] = min(w, v + max(1, v // 2)) if w > v else v
    return out or None


def _verdict(report) -> str:
    if report.ok:
        return "ok"
    return report.failure.kind if report.failure else "failed"


def first_kernel_one(name: str, src: Path, args: argparse.Namespace, out_dir: Path, evaluator) -> dict:
    """The offline model's first kernel for `src`: validate at small, compile small/--size for v6e."""
    from maxkernel.clients.offline.first_kernel import NoKernel, first_kernel
    from maxkernel.clients.offline.model import NoTemplateFits
    from maxkernel.tpu_tools.hardware.chips import get_chip
    from maxkernel.tpu_tools.problem.input_cases import InputCase
    from maxkernel.tpu_tools.problem.program import describe

    started = time.perf_counter()
    record: dict = {"name": name, "mode": "first-kernel", "size": args.size}
    try:
        source = first_kernel(describe(str(src)).model_dump(mode="json"), get_chip("tpu-v6e"))
    except (NoKernel, NoTemplateFits) as e:
        record |= {"ok": False, "outcome": f"no kernel: {str(e)[:200]}"}
        (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
        return record
    kernel = out_dir / f"{name}.kernel.py"
    kernel.write_text(source)
    m = re.search(r"offline-config: template=(\w+)", source)
    record["template"] = m.group(1) if m else None
    record["compile_small"] = _verdict(evaluator.compile(str(kernel), str(src), "tpu-v6e", "small"))
    full = evaluator.compile(str(kernel), str(src), "tpu-v6e", args.size, timeout_s=args.compile_timeout_s)
    record["compile_at_size"] = _verdict(full)
    if not full.ok and full.failure:
        record["compile_failure"] = full.failure.message[-300:]
    val = evaluator.validate(str(kernel), str(src), "cpu", "small", seeds=args.seeds)
    record["validate_small"] = _verdict(val)
    if args.larger:
        case = larger_case(src)
        if case is None:
            record["validate_larger"] = "no larger size"
        else:
            record["larger_sizes"] = case
            report = evaluator.validate(
                str(kernel), str(src), "cpu", "small", seeds=1, case=InputCase(name="larger", sizes=case)
            )
            record["validate_larger"] = _verdict(report)
    record["ok"] = record["validate_small"] == "ok"
    record["wall_s"] = round(time.perf_counter() - started, 1)
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
    return record


def report_first_kernels(results: list[dict], size: str) -> None:
    """Counts per column, then the kernels that validate at small but fail at the target, by reason."""
    runs = [r for r in results if r.get("mode") == "first-kernel"]
    wrote = [r for r in runs if "validate_small" in r]
    valid = [r for r in wrote if r["validate_small"] == "ok"]
    print(f"\nfirst kernels of the offline model over {len(runs)} references (compiles are for tpu-v6e)")
    print(f"  wrote a kernel:                 {len(wrote)}")
    print(f"  validate at small (interpret):  {len(valid)}")
    print(f"  compile at small:               {sum(r['compile_small'] == 'ok' for r in wrote)}")
    print(f"  compile at {size:<20s} {sum(r['compile_at_size'] == 'ok' for r in wrote)}")
    both = [r for r in valid if r["compile_at_size"] == "ok"]
    print(f"  validate at small AND compile at {size}: {len(both)}")
    larger = [r for r in wrote if "validate_larger" in r]
    if larger:
        print(
            f"  validate at a larger non-multiple size: {sum(r['validate_larger'] == 'ok' for r in larger)} of {len(larger)}"
        )
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for r in valid:
        if r["compile_at_size"] != "ok":
            why = r.get("compile_failure", r["compile_at_size"])
            for pattern in BOILERPLATE:
                why = re.sub(pattern, "", why)
            why = re.sub(r"\s+", " ", why.strip().splitlines()[-1] if why.strip() else why)[:100]
            groups[f"{r['compile_at_size']}: {why}"].append(r["name"])
    for r in runs:
        if "validate_small" not in r:
            groups[r.get("outcome", "no kernel")[:110]].append(r["name"])
    if groups:
        print("not validated-and-compiled, by reason:")
        for why, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(names):2d}  {why}: {', '.join(names)}")


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
    p.add_argument(
        "--size", default=None, help="also compile each kernel for tpu-v6e at this size (e.g. full)"
    )
    p.add_argument("--first-kernel", action="store_true", help="judge the first kernel only, no Auto loop")
    p.add_argument("--compile-timeout-s", type=float, default=240.0, help="--first-kernel: per compile")
    p.add_argument(
        "--larger", action="store_true", help="--first-kernel: validate at a larger non-multiple size"
    )
    args = p.parse_args(argv)
    if args.first_kernel:
        args.size = args.size or "full"
    mode = "first" if args.first_kernel else args.target
    out_dir = Path(args.out or ROOT / ".bench" / f"offline_coverage-{mode}")
    out_dir.mkdir(parents=True, exist_ok=True)
    refs = references(args.tasks, own=not args.no_own)
    i, n = (int(x) for x in args.shard.split("/"))
    results = []
    pool = evaluator = None
    if args.first_kernel and not args.report_only:
        from maxkernel.tpu_tools.judge.evaluate import Evaluator
        from maxkernel.tpu_tools.pool.workers import WorkerPool

        pool = WorkerPool(max_workers=2)
        evaluator = Evaluator(pool, timeout_s=args.timeout_s)
    for k, (name, src) in enumerate(refs):
        saved = out_dir / f"{name}.json"
        if saved.exists() and not args.redo:
            results.append(json.loads(saved.read_text()))
            continue
        if args.report_only or k % n != i:
            continue
        if args.first_kernel:
            rec = first_kernel_one(name, src, args, out_dir, evaluator)
            results.append(rec)
            cols = [
                rec.get(c, "-")
                for c in ("validate_small", "compile_small", "compile_at_size", "validate_larger")
            ]
            print(
                f"{name:60s} {rec.get('template') or '-':12s} "
                + " ".join(f"{c!s:14s}" for c in cols)
                + (rec.get("outcome") or ""),
                flush=True,
            )
            continue
        rec = run_one(name, src, args, out_dir)
        results.append(rec)
        status = "ok" if rec["ok"] else f"FAIL {reason(rec)}"
        print(
            f"{name:60s} {rec.get('template') or '-':12s} {rec.get('wall_s', '-')!s:>7s} s  {status}",
            flush=True,
        )
    if pool is not None:
        pool.close()
    if args.first_kernel:
        report_first_kernels(results, args.size)
        return 0
    tasks = [r for r in results if re.match(r"\d+[pk]_", r["name"])]
    own = [r for r in results if r not in tasks]
    print(f"\ntarget {args.target}, {args.iterations} iteration(s), references copied out (no task id)")
    print(f"JaxBench tasks validated: {sum(r['ok'] for r in tasks)} of {len(tasks)} run")
    if args.size:
        fine = sum(r.get("compiles_at_size") == "ok" for r in tasks)
        print(f"  of which the best kernel compiles at {args.size} for tpu-v6e: {fine}")
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
