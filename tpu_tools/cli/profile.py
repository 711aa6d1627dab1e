"""`maxkernel profile` and `maxkernel trace` (registered by cli.py): timings with their noise, trace tables."""

from __future__ import annotations

import argparse

from maxkernel.tpu_tools.errors import UsageError


def cmd_profile(args) -> int:
    from maxkernel.tpu_tools.cli.args import size_kwargs
    from maxkernel.tpu_tools.cli.main import _print_json, _verdict_exit
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    if args.reps < 1:
        raise UsageError(f"--reps must be >= 1, got {args.reps}")
    report = Evaluator(timeout_s=args.timeout).profile(
        args.kernel,
        args.reference,
        args.target,
        **size_kwargs(args.size),
        trace_dir=args.trace_dir,
        measure_interpret=args.measure_interpret,
        reps=args.reps,
    )
    _print_json(report) if args.json else render_profile(report)
    return _verdict_exit(report)


def cmd_trace(args) -> int:
    from maxkernel.tpu_tools.cli.main import _print_json
    from maxkernel.tpu_tools.judge.evaluate import summarize_trace
    from maxkernel.tpu_tools.profile.trace_summary import TraceFormatError

    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    try:
        summary = summarize_trace(args.path, top=args.top)
    except TraceFormatError as e:
        raise UsageError(str(e)) from None
    if args.json:
        _print_json(summary)
    else:
        print(summary.text)
    return 0


def render_profile(r) -> None:
    from rich.table import Table

    from maxkernel.tpu_tools.cli.render import _failure, console, profile_trace_text

    head = "[bold green]✓ profiled[/]" if r.ok else "[bold red]✗ not profiled[/]"
    ref = r.reference.name if r.reference else "?"
    console.print(f"{head} {r.kernel_path} vs {ref} for [bold]{r.target}[/] (size {r.size})")
    if r.nothing_measured:
        console.print(f"  [yellow]{r.nothing_measured}[/]")
        console.print(f"  {r.execution}")
    elif r.execution:
        fresh = "fresh" if r.fresh_inputs else "identical (reference not seedable)"
        console.print(
            f"  {r.execution}; timings on {r.measured_on}, one of {r.input_sets} {fresh} input sets per timed call"
        )
    if r.timed_outputs_checked:
        console.print(f"  every timed output checked against the reference's ({r.timed_outputs_checked})")
    if r.first_clock_check:
        f = r.first_clock_check
        console.print(
            f"  first timing's clock disagreed ({f.unexplained_ms:.3g} ms unexplained per call, tolerance "
            f"{f.tolerance_ms:.3g} ms): timed again in a fresh process, only that timing counts"
        )
    if r.clock_check:
        c = r.clock_check
        state = "agrees" if c.agrees else "[red]disagrees[/]"
        console.print(
            f"  candidate clock {state} with the judge's: {c.unexplained_ms:.3g} ms unexplained per call "
            f"(tolerance {c.tolerance_ms:.3g} ms)"
        )
    if r.plausibility and r.plausibility.roofline_ms is not None:
        console.print(f"  roofline check: {r.plausibility.note}")
    if r.measured:
        table = Table("program", "median ms", "95% CI ms", "IQR ms", "n", "source")
        for name, s in r.measured.items():
            ci = f"{s.ci95_low_ms:.4g}–{s.ci95_high_ms:.4g}"
            source = s.timing_source + (f" ({s.note})" if s.note else "")
            table.add_row(name, f"{s.median_ms:.4g}", ci, f"{s.iqr_ms:.3g}", str(s.n), source)
        console.print(table)
    if r.noise_floor:
        nf = r.noise_floor
        console.print(
            f"  noise floor: reference vs itself {nf.ratio:.3f}x (95% CI {nf.ci95_low:.3f}–{nf.ci95_high:.3f})"
        )
    if r.speedup:
        s = r.speedup
        verdict = "significant" if s.significant else "not significant"
        console.print(
            f"  [bold]speedup {s.ratio:.3f}x[/] (95% CI {s.ci95_low:.3f}–{s.ci95_high:.3f}, {verdict}); {r.speedup_note}"
        )
    elif not r.nothing_measured:
        console.print(f"  {r.candidate_not_measured_reason or r.speedup_note}")
    if r.interpret_timing_label:
        console.print(f"  [yellow]candidate timing: {r.interpret_timing_label}[/]")
    if r.throughput:
        t = r.throughput
        for name, tp in t.per_function.items():
            frac = (
                f", {tp.roofline_fraction:.2%} of roofline ({tp.roofline_bound})"
                if tp.roofline_fraction
                else ""
            )
            rate = f"{tp.tflops:.3g} TFLOP/s, " if tp.tflops is not None else ""
            console.print(f"  {name}: {rate}{tp.gbps:.3g} GB/s{frac}")
        console.print(f"  [dim]flops from {t.flops_source}; bytes = inputs + outputs; {t.peak_label}[/]")
    if r.nothing_measured and r.reference_estimate:
        e = r.reference_estimate
        console.print(
            f"  reference's static estimate ({e.tier}) on {e.chip}: {e.estimated_time_us:.3g} us, {e.bound}-bound"
        )
    if r.static_estimate:
        e = r.static_estimate
        console.print(
            f"  static estimate ({e.tier}) on {e.chip}: {e.estimated_time_us:.3g} us, {e.bound}-bound, "
            f"{e.fraction_of_roofline:.0%} of roofline; {e.reason}"
        )
    if r.trace_summary:
        console.print(f"  trace: {r.trace_path}")
        console.print(
            profile_trace_text(
                r.trace_summary.text, r.trace_summary.ops, candidate_traced=r.candidate_execution == "native"
            ),
            highlight=False,
            markup=False,
        )
    for w in r.warnings:
        console.print(f"  [yellow]warning[/]: {w}")
    if r.failure:
        _failure(r.failure)


def register(sub) -> None:
    from maxkernel.tpu_tools.cli.args import DEFAULT_REPS, PROFILE_TIMEOUT_S, add_trace_dir
    from maxkernel.tpu_tools.cli.main import _add_eval_args

    p: argparse.ArgumentParser = sub.add_parser(
        "profile", help="time a kernel against its reference, trace it"
    )
    _add_eval_args(p, timeout_s=PROFILE_TIMEOUT_S)
    add_trace_dir(p)
    p.add_argument(
        "--measure-interpret",
        action="store_true",
        help="also time a Pallas kernel in TPU interpret mode when its chip is absent (labeled, no speedup)",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=DEFAULT_REPS,
        help="timed calls per program, each on a fresh input set (memory permitting)",
    )
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("trace", help="summarize a profiler trace (logdir, .trace.json.gz, .xplane.pb)")
    p.add_argument("path", help="trace file or logdir")
    p.add_argument("--top", type=int, default=15, help="ops to list")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_trace)
