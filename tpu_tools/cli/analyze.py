"""`maxkernel analyze` and `maxkernel estimate` (registered by cli.py): the compiler's view, and the estimate.

Both compile only (no chip needed): `analyze` prints what libtpu's final schedule says (bundles,
units, spills, VMEM, DMAs, outside-kernel programs); `estimate` prints the labeled static estimate
(tier `llo` or `model`). Same pydantic reports as the MCP tools `analyze_kernel` / `estimate_kernel`.
"""

from __future__ import annotations

import argparse


def cmd_analyze(args) -> int:
    from maxkernel.tpu_tools.cli.args import size_kwargs
    from maxkernel.tpu_tools.cli.main import _print_json, _verdict_exit
    from maxkernel.tpu_tools.errors import UsageError
    from maxkernel.tpu_tools.hardware.targets import parse_target

    if parse_target(args.target).kind != "tpu":
        raise UsageError(f"analyze needs a TPU target (tpu-v5e, tpu-v6e, ...), got {args.target!r}")
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    report = Evaluator(timeout_s=args.timeout).analyze(
        args.kernel, args.reference, args.target, **size_kwargs(args.size)
    )
    if args.json:
        _print_json(report)
    else:
        render_analysis(report)
    return _verdict_exit(report)


def cmd_estimate(args) -> int:
    from maxkernel.tpu_tools.cli.args import size_kwargs
    from maxkernel.tpu_tools.cli.main import _print_json, _verdict_exit
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    report = Evaluator(timeout_s=args.timeout).estimate(
        args.kernel, args.reference, args.target, **size_kwargs(args.size)
    )
    if args.json:
        _print_json(report)
    else:
        render_estimate(report)
    return _verdict_exit(report)


def render_analysis(r) -> None:
    from maxkernel.tpu_tools.cli.render import _failure, console

    head = "[bold green]✓ analyzed[/]" if r.ok else "[bold red]✗ not analyzed[/]"
    console.print(
        f"{head} {r.kernel_path} for [bold]{r.target}[/] (size {r.size}), tier {r.tier}: {r.tier_note}"
    )
    if r.summary:
        console.print(r.summary, markup=False, highlight=False)
    if r.compile_ms is not None:
        console.print(f"  compile {r.compile_ms:.0f} ms, reading the dump {r.analysis_ms or 0:.0f} ms")
    if r.failure:
        _failure(r.failure)


def render_estimate(r) -> None:
    from maxkernel.tpu_tools.cli.render import _failure, console

    if r.ok and r.estimate is not None:
        e = r.estimate
        console.print(
            f"[bold]estimate[/] ({e.tier}) {e.estimated_time_us:.4g} us on {e.chip}, {e.bound}-bound: {e.reason}",
            highlight=False,
        )
        console.print(f"  {e.tier_note}", markup=False, highlight=False)
        if e.xla_fusions is not None:
            t = e.xla_fusions
            console.print(
                f"  XLA program, {len(t.fusions)} ops: {t.total_us:.4g} us fusion by fusion "
                f"(whole-program roofline {e.roofline_time_us:.4g} us); the slowest:",
                highlight=False,
            )
            for f in t.top(6):
                where = f" {f.op_names[0]}" if f.op_names else ""
                console.print(
                    f"    {f.name:<28} {f.estimated_time_us:>10.4g} us {f.bound:<8} {f.tier}{where}",
                    markup=False,
                    highlight=False,
                )
        for p in r.layout_problems:
            console.print(f"  [yellow]layout:[/] {p}", highlight=False)
    else:
        console.print(f"[bold red]✗ no estimate[/] for {r.kernel_path}")
    if r.failure:
        _failure(r.failure)


def register(sub: argparse._SubParsersAction) -> None:
    from maxkernel.tpu_tools.cli.main import _add_eval_args

    p = sub.add_parser("analyze", help="compile with libtpu's LLO dump: bundles, units, spills, VMEM, DMAs")
    _add_eval_args(p, "tpu-v5e")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("estimate", help="static TPU time estimate (tier llo or model), never a timing")
    _add_eval_args(p, "tpu-v5e")
    p.set_defaults(func=cmd_estimate)
