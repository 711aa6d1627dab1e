"""`maxkernel port` (registered by cli.py): a PyTorch or Triton source to a JAX reference, checked on CPU.

`maxkernel port SOURCE` writes the port (SOURCE_port.py beside it, or --out) and checks it against the
source over fresh seeds; `--check REF.py` checks a port written elsewhere instead. Same PortReport as the
MCP tool `port_source`. Exit 0 match, 1 refused, 2 bad input or a source that fails on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from maxkernel.tpu_tools.errors import UsageError


def cmd_port(args) -> int:
    from maxkernel.tpu_tools.cli.main import _print_json
    from maxkernel.tpu_tools.port.run import port_source

    if not Path(args.source).is_file():
        raise UsageError(f"source file not found: {args.source}")
    if args.check and args.out:
        raise UsageError("--check checks an existing port; --out names a port to write: give one")
    report = port_source(
        args.source,
        out=args.out,
        check=args.check,
        seeds=args.seeds,
        seed_offset=args.seed_offset,
        allow_weak_check=args.allow_weak_check,
    )
    _print_json(report) if args.json else render_port(report)
    if report.status == "source_error":
        print(f"maxkernel: source_error: {report.summary}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


def render_port(r) -> None:
    from maxkernel.tpu_tools.cli.render import console

    head = "[bold green]✓ port matches its source[/]" if r.ok else f"[bold red]✗ {r.status}[/]"
    console.print(f"{head} {r.source} -> {r.port or '-'} (path: {r.port_path or '-'})")
    console.print(r.summary, markup=False, highlight=False)
    for t in r.paths_tried:
        console.print(
            f"  tried {t.path}: {'ok' if t.ok else 'no'} - {t.detail}", markup=False, highlight=False
        )
    for c in r.changes:
        console.print(f"  changed ({c.kind}): {c.detail}", markup=False, highlight=False)
    if r.check and r.check.per_seed:
        sizes = r.check.per_seed_size or ["full"] * len(r.check.per_seed)
        for s, size in zip(r.check.per_seed, sizes, strict=False):
            trivial = (
                f", trivial passing: {', '.join(s.trivial_outputs_passing)}"
                if s.trivial_outputs_passing
                else ""
            )
            console.print(
                f"  {size} seed {s.seed}: {'ok' if s.ok else 'FAIL'} max abs err {s.max_abs_err:.3g}{trivial}",
                markup=False,
                highlight=False,
            )


def register(sub) -> None:
    from maxkernel.tpu_tools.cli import args as cli_args

    p = cli_args.subparser(
        sub,
        "port",
        help="port a PyTorch/Triton source to a JAX reference and check it against the source on CPU",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="a KernelBench-style file (Model, get_inputs, get_init_inputs), an nn.Module file with an "
        "inputs function, or a Triton kernel with its PyTorch launcher",
    )
    p.add_argument("--out", metavar="PATH", help="the port to write (default: SOURCE_port.py beside SOURCE)")
    p.add_argument(
        "--check",
        metavar="REF.py",
        help="check this port (written by hand or another tool) against SOURCE instead of writing one",
    )
    cli_args.add_seeds(p)
    p.add_argument(
        "--allow-weak-check", action="store_true", help="accept when a trivial output would also pass"
    )
    cli_args.add_json(p)
    p.set_defaults(func=cmd_port)
