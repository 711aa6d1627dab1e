"""`maxkernel hotspots|extract|compose MODEL`: from a model step to its regions and back (registered by main.py).

Compile-only for the target (no chip): the hotspot table is a static estimate and says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError

HOTSPOTS_TIMEOUT_S = 1800.0  # a production layer compiles for a minute or more on a loaded CPU


def _model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", metavar="MODEL", help="a model reference: a JaxBench model id or a reference file"
    )


def _check_model(args) -> None:
    cli_args.check_target(args.target)
    args.model = cli_args.check_reference(args.model)


def _check_new_file(path: str | None, what: str) -> None:
    if path and Path(path).is_dir():
        raise UsageError(f"{what} {path} is a directory; give a file path")


def cmd_hotspots(args) -> int:
    from maxkernel.tpu_tools.cli.main import _print_json
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.model.hotspots import hotspots_in_child

    _check_model(args)
    if parse_target(args.target).kind != "tpu":
        raise UsageError(
            f"hotspots costs the step on a TPU target (tpu-v5e, tpu-v6e, ...), got {args.target!r}"
        )
    _check_new_file(args.html, "--html")
    live = _live(args)
    report = hotspots_in_child(
        Evaluator(timeout_s=args.timeout), args.model, args.target, args.size, on_progress=live
    )
    if args.html:
        from maxkernel.tpu_tools.model.picture import render_html

        Path(args.html).write_text(render_html(report))
    if args.json:
        _print_json(report)
    else:
        render_hotspots(report, args.html)
    return 0


def _live(args):
    """One progress line on stderr while the child works (quiet under --json)."""
    import sys

    if args.json:
        return None

    def show(stage: str) -> None:
        print(f"  … {stage}", file=sys.stderr, flush=True)

    return show


def render_hotspots(r, html_path: str | None = None) -> None:
    from maxkernel.tpu_tools.cli.render import console
    from maxkernel.tpu_tools.cli.tables import print_named

    console.print(
        f"[bold]hotspots[/] {r.model} on [bold]{r.target}[/] (size {r.size}): step {r.step_us:.4g} us, "
        f"estimate ({r.tier}); compile {r.compile_time_ms / 1e3:.1f} s, analysis {r.analysis_time_ms / 1e3:.1f} s",
        highlight=False,
    )
    name, _ = print_named(
        console,
        lambda name, full: hotspot_table(r, name, full),
        _region_names(r),
        "region ids",
        "GFLOP and HBM MiB",
    )
    for c in r.regions:
        if not c.fusions and c.fused_into:
            console.print(
                f"  {name(c.region.id)}: fused into {', '.join(map(name, c.fused_into))}", markup=False
            )
    mark = "[green]✓[/]" if r.sum_ok else "[yellow]![/]"
    console.print(f"{mark} {r.sum_note}", highlight=False)
    for n in r.notes:
        console.print(f"  note: {n}", markup=False, highlight=False)
    if html_path:
        console.print(f"  picture: {html_path}", markup=False, highlight=False)


def _region_names(r) -> list[str]:
    return [c.region.id for c in r.regions] + [n for c in r.regions for n in c.fused_into]


def hotspot_table(r, name=lambda s: s, full: bool = True):
    """The hotspot table, each region id shown as `name(id)`, without GFLOP and HBM MiB unless `full`
    (tpu_tools/cli/tables.py picks both for the terminal's width). A region XLA fused into its neighbours'
    fusions is bound "fused"; render_hotspots lists what it is fused into below the table."""
    from maxkernel.tpu_tools.cli import tables

    def bound(c) -> str:
        return "fused" if not c.fusions and c.fused_into else c.bound

    t = tables.new_table()
    tables.add_name_column(t, "region")
    tables.add_word_column(t, "kind", [c.region.kind for c in r.regions])
    for col in ("×", "µs\neach", "µs\ntotal", "share"):
        tables.add_number_column(t, col)
    tables.add_word_column(t, "bound", [bound(c) for c in r.regions])
    tables.add_number_column(t, "head-\nroom")
    if full:
        tables.add_number_column(t, "GFLOP")
        tables.add_number_column(t, "HBM\nMiB")
    for c in r.regions:
        g = c.region
        cells = [name(g.id), g.kind, str(g.count), f"{c.time_us:.4g}", f"{c.total_us:.4g}", f"{100 * c.share:.1f}%",
                 bound(c), f"{c.headroom:.2f}x"]  # fmt: skip
        if full:
            cells += [f"{c.flops / 1e9:.3g}", f"{c.hbm_bytes / 2**20:.4g}"]
        t.add_row(*cells)
    return t


def cmd_extract(args) -> int:
    from maxkernel.tpu_tools.cli.main import _print_json
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.model.extract import extract_in_child

    args.model = cli_args.check_reference(args.model)
    if not args.region or not args.region.strip():
        raise UsageError("--region is empty: give a region id from `maxkernel hotspots MODEL`")
    out = args.out or f"{Path(args.model).stem}.{args.region}.py"
    _check_new_file(out, "--out")
    if Path(out).exists():
        raise UsageError(f"--out {out} exists; extract writes a new file")
    report = extract_in_child(
        Evaluator(timeout_s=args.timeout), args.model, args.region, out, on_progress=_live(args)
    )
    if args.json:
        _print_json(report)
        return 0
    from maxkernel.tpu_tools.cli.render import console

    console.print(
        f"[bold]extract[/] {report.model} region [bold]{report.region}[/] (x{report.count}, "
        f"{report.equations} equations) -> {report.path}",
        highlight=False,
    )
    for s in report.inputs:
        what = (
            f"p(true)={s.p_true:.3g}" if s.kind == "bool"
            else f"mean {s.mean:.3g} std {s.std:.3g} in [{s.min:.3g}, {s.max:.3g}]"
        )  # fmt: skip
        console.print(f"  {s.name} {s.dtype}{s.shape_full}: {what}", markup=False, highlight=False)
    console.print(
        f"  tolerance atol {report.tolerance.atol:g} rtol {report.tolerance.rtol:g} ({report.tolerance.source})",
        markup=False,
        highlight=False,
    )
    for c in report.checks:
        console.print(f"[green]✓[/] {c}", highlight=False)
    return 0


def cmd_compose(args) -> int:
    from maxkernel.tpu_tools.cli.main import _print_json
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.model.compose import compose, parse_kernels

    _check_model(args)
    kernels = parse_kernels(args.region_kernels or [])
    out = args.out or f"{Path(args.model).stem}.composed"
    if Path(out).exists():
        raise UsageError(f"--out {out} exists; compose writes a new directory")
    report = compose(
        Evaluator(timeout_s=args.timeout), args.model, kernels, out, target=args.target, size=args.size,
        check_sizes=args.check_sizes, seeds=args.seeds, seed_offset=args.seed_offset, on_progress=_live(args),
    )  # fmt: skip
    if args.json:
        _print_json(report)
    else:
        from maxkernel.tpu_tools.cli.render import console

        mark = "[green]✓[/]" if report.ok else "[red]✗[/]"
        console.print(f"{mark} compose {report.model}: {report.verdict}", highlight=False)
        console.print(f"  composed step: {report.composed_path}", markup=False, highlight=False)
        console.print(f"  tolerance: {report.tolerance_note}", markup=False, highlight=False)
        render_step_estimate(report.estimate, report.estimate_note)
    return 0 if report.ok else 1


def render_step_estimate(e, why_none: str = "") -> None:
    """Before/after per replaced region and for the whole step, with the Amdahl sum written out."""
    from maxkernel.tpu_tools.cli import tables
    from maxkernel.tpu_tools.cli.render import console

    if e is None:
        if why_none:
            console.print(f"  {why_none}", markup=False, highlight=False)
        return
    console.print(
        f"[bold]estimate[/] on {e.target} at size {e.size} ({e.tier}; nothing measured):", highlight=False
    )

    def build(name, full: bool):
        t = tables.new_table()
        tables.add_name_column(t, "region")
        for col in ("×", "before\nµs each", "before\nµs", "after\nµs each", "after\nµs", "speedup"):
            tables.add_number_column(t, col)
        t.add_column("note", ratio=1)
        for r in e.regions:
            t.add_row(
                name(r.region), str(r.count), f"{r.before_each_us:.4g}", f"{r.before_us:.4g}",
                "-" if r.after_each_us is None else f"{r.after_each_us:.4g}",
                "-" if r.after_us is None else f"{r.after_us:.4g}",
                "-" if r.speedup is None else f"{r.speedup:.2f}x", r.note,
            )  # fmt: skip
        return t

    tables.print_named(console, build, [r.region for r in e.regions], "region ids")
    console.print(f"  step: {e.arithmetic} (estimate)", markup=False, highlight=False)
    if e.composed_note:
        console.print(f"  {e.composed_note}", markup=False, highlight=False)
    for n in e.notes:
        console.print(f"  note: {n}", markup=False, highlight=False)


def register(sub) -> None:
    from maxkernel.tpu_tools.model.compose import COMPOSE_CHECK_SIZES_TEXT

    p = cli_args.subparser(
        sub, "hotspots", help="a model step's regions and their estimated cost on a target"
    )
    _model_arg(p)
    cli_args.add_target(p)
    cli_args.add_size(p)  # the production size: the regions and their costs at the shapes the model runs
    cli_args.add_timeout(p, HOTSPOTS_TIMEOUT_S)
    cli_args.add_json(p)
    p.add_argument("--html", metavar="PATH", help="also write the picture (a bar per region) to PATH")
    p.set_defaults(func=cmd_hotspots)

    p = cli_args.subparser(
        sub, "extract", help="one region of a model step as a standalone reference file, checked by splicing"
    )
    _model_arg(p)
    p.add_argument("--region", required=True, metavar="ID", help="a region id from `maxkernel hotspots`")
    p.add_argument(
        "--out", metavar="PATH", help="the file to write (default: MODEL.ID.py here; must not exist)"
    )
    cli_args.add_timeout(p, HOTSPOTS_TIMEOUT_S)
    cli_args.add_json(p)
    p.set_defaults(func=cmd_extract)

    p = cli_args.subparser(
        sub, "compose", help="the model with kernels in place of regions, validated end to end as a candidate"
    )
    _model_arg(p)
    p.add_argument(
        "--kernel",
        action="append",
        dest="region_kernels",
        metavar="ID=kernel.py",
        help="a kernel file for region ID (repeat for more)",
    )
    p.add_argument(
        "--out", metavar="DIR", help="the new directory for the composed step (default MODEL.composed)"
    )
    cli_args.add_target(p)
    cli_args.add_size(p)  # where the composed step compiles and is estimated before/after
    cli_args.add_check_sizes(p, COMPOSE_CHECK_SIZES_TEXT)  # compose's own default: a whole step interpreted
    p.add_argument("--target-size", dest="size", help=argparse.SUPPRESS)  # the old spelling of --size
    cli_args.add_seeds(p)
    cli_args.add_timeout(p, HOTSPOTS_TIMEOUT_S)
    cli_args.add_json(p)
    p.set_defaults(func=cmd_compose)
