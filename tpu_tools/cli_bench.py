"""`maxkernel bench` (registered by cli.py): JaxBench tasks through compile, validate and profile."""

from __future__ import annotations

import argparse
import json

from maxkernel.tpu_tools.errors import UsageError


def cmd_bench(args) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from maxkernel.jaxbench import registry
    from maxkernel.tpu_tools.bench import run_bench
    from maxkernel.tpu_tools.evaluate import Evaluator

    if args.all == bool(args.tasks):
        raise UsageError("give either --tasks ID[,ID…] or --all")
    try:
        ids = (
            registry.list_task_ids()
            if args.all
            else [registry.resolve_id(t) for t in args.tasks.split(",") if t]
        )
    except registry.UnknownTaskError as e:
        raise UsageError(str(e)) from None
    if args.size not in ("small", "full"):
        raise UsageError(f"--size must be small or full, got {args.size!r}")
    evaluator = Evaluator(timeout_s=args.timeout)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        transient=args.json,
        disable=args.json,
    ) as progress:
        bar = progress.add_task("bench", total=len(ids))
        seen: set[str] = set()

        def on_row(task: str, variant: str) -> None:
            if task not in seen:
                if seen:
                    progress.advance(bar)
                seen.add(task)
            progress.update(bar, description=f"{task} {variant}")

        results = run_bench(
            ids, target=args.target, size=args.size, out_dir=args.out, evaluator=evaluator, on_row=on_row
        )
        progress.update(bar, completed=len(ids), description="done")
    if args.json:  # the suite's row shape (maxkernel.tpu_tools.scoreboard.read_rows parses both)
        print(json.dumps(results.as_suite_json(), indent=2))
    else:
        render_bench(results)
    return 0 if all(r.status == "ok" for r in results.rows) else 1


def render_bench(results) -> None:
    from rich.table import Table

    from maxkernel.tpu_tools.render import console

    measured_on = next((r.measured_on for r in results.rows if r.measured_on), "?")
    table = Table(
        "task",
        "variant",
        "status",
        f"median ms ({measured_on})",
        "TFLOP/s",
        "% roofline",
        f"estimate µs ({results.target})",
        "bound",
    )
    for r in results.rows:
        table.add_row(
            r.task,
            r.variant,
            "[green]ok[/]" if r.status == "ok" else f"[red]{r.status}[/]",
            f"{r.median_ms:.4g}" if r.median_ms is not None else (r.timing_note[:30] or "-"),
            f"{r.tflops:.3g}" if r.tflops is not None else "-",
            f"{100 * r.roofline_fraction:.2g}%" if r.roofline_fraction is not None else "-",
            f"{r.estimate_us:.4g}" if r.estimate_us is not None else "-",
            r.estimate_bound or "-",
        )
    console.print(table)
    for r in results.rows:
        if r.status != "ok":
            console.print(f"[red]{r.task} {r.variant}[/]: {r.stage_failed}: {r.message}")
    console.print(
        f"results: {results.out_dir}/results.json, results.csv  (estimates are static models, not measurements)"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run JaxBench tasks: compile, validate the Pallas reference, profile")
    p.add_argument("--tasks", help="comma-separated ids, e.g. 8p_GEMM,12p_RMSNorm")
    p.add_argument("--all", action="store_true", help="all 50 tasks")
    p.add_argument("--size", default="small")
    p.add_argument("--target", "-t", default="cpu")
    p.add_argument("--out", default="jaxbench-results", help="results directory (never inside the package)")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)
