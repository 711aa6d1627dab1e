"""`maxkernel`: compile, validate, profile and benchmark Pallas kernels from the shell.

Exit status: 0 good verdict, 1 negative verdict, 2 usage/input error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pydantic import BaseModel

from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError


def _print_json(model: BaseModel | list) -> None:
    if isinstance(model, list):
        print(json.dumps([m.model_dump(mode="json") for m in model], indent=2))
    else:
        print(model.model_dump_json(indent=2))


def _check_inputs(args) -> None:
    """Catch the caller's mistakes before any child starts (cheap, no jax import)."""
    if hasattr(args, "reference_task"):
        cli_args.take_reference(args)
    if hasattr(args, "kernel") and not Path(args.kernel).is_file():
        raise UsageError(f"kernel file not found: {args.kernel}")
    if hasattr(args, "target"):
        cli_args.check_target(args.target)
    if hasattr(args, "reference_task") and not args.reference:
        raise UsageError("give the reference: --reference ID|PATH (a JaxBench task id or a reference file)")
    if getattr(args, "reference", None):
        cli_args.check_reference(args.reference)


def _verdict_exit(report) -> int:
    if report.failure is not None and report.failure.kind == "usage_error":
        print(f"maxkernel: {report.failure.summary}", file=sys.stderr)
        return 2
    if report.failure is not None and report.failure.kind == "interpret_unsupported":
        return 3  # not a pass, not the kernel's fault: the numbers need the chip (README, exit status)
    return 0 if report.ok else 1


def cmd_compile(args) -> int:
    from maxkernel.tpu_tools.cli.render import render_compile
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    report = Evaluator(timeout_s=args.timeout).compile(
        args.kernel, args.reference, args.target, **cli_args.size_kwargs(args.size)
    )
    _print_json(report) if args.json else render_compile(report)
    return _verdict_exit(report)


def cmd_validate(args) -> int:
    from maxkernel.tpu_tools.cli.render import render_validation
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    report = Evaluator(timeout_s=args.timeout).validate(
        args.kernel,
        args.reference,
        args.target,
        args.size,
        check_sizes=args.check_sizes,
        seeds=args.seeds,
        seed_offset=args.seed_offset,
        atol=args.atol,
        rtol=args.rtol,
        allow_plain_jax=args.allow_plain_jax,
        allow_weak_check=args.allow_weak_check,
        caller="cli",
        strict_shapes=args.strict_shapes,
    )
    _print_json(report) if args.json else render_validation(report)
    return _verdict_exit(report)


def cmd_chips(args) -> int:
    from maxkernel.tpu_tools.cli.render import render_chips
    from maxkernel.tpu_tools.hardware.chips import CHIPS

    _print_json(list(CHIPS.values())) if args.json else render_chips(list(CHIPS.values()))
    return 0


def cmd_tasks(args) -> int:
    from maxkernel.tpu_tools.cli.render import render_tasks
    from maxkernel.tpu_tools.problem.tasks import list_tasks

    tasks = list_tasks()
    _print_json(tasks) if args.json else render_tasks(tasks)
    return 0


def _add_eval_args(
    p: argparse.ArgumentParser,
    default_target: str = cli_args.DEFAULT_TARGET,
    default_size: str | None = cli_args.DEFAULT_SIZE,
    *,
    timeout_s: float = cli_args.DEFAULT_TIMEOUT_S,
) -> None:
    """The flags every kernel-evaluating subcommand shares (compile, validate, profile, ...)."""
    p.add_argument("kernel", help="candidate kernel file exposing workload(*inputs)")
    cli_args.add_reference(p)
    cli_args.add_target(p, default_target)
    cli_args.add_size(p, default_size)
    cli_args.add_timeout(p, timeout_s)
    cli_args.add_json(p)
    p.add_argument(
        "--require-sandbox",
        action="store_true",
        help="refuse to evaluate where no OS sandbox isolates the job",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.parser("maxkernel", __doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = cli_args.subparser(sub, "compile", help="trace, lower and compile a kernel for a target")
    _add_eval_args(p)
    p.set_defaults(func=cmd_compile)

    p = cli_args.subparser(
        sub,
        "validate",
        help="compile at the target size, then check against the reference at the check sizes",
    )
    _add_eval_args(p)
    cli_args.add_check_sizes(p)
    cli_args.add_seeds(p)
    p.add_argument("--atol", type=float, help="absolute tolerance (default: the reference's)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: the reference's)")
    p.add_argument("--allow-plain-jax", action="store_true", help="accept candidates without a pallas_call")
    p.add_argument(
        "--allow-weak-check", action="store_true", help="accept when a trivial output would also pass"
    )
    cli_args.add_strict_shapes(p)
    p.set_defaults(func=cmd_validate)

    p = cli_args.subparser(sub, "chips", help="TPU chip specs")
    cli_args.add_json(p, "the chips")
    p.set_defaults(func=cmd_chips)

    p = cli_args.subparser(sub, "tasks", help="the 50 JaxBench tasks")
    cli_args.add_json(p, "the tasks")
    p.set_defaults(func=cmd_tasks)

    for register in _extensions():
        register(sub)
    return parser


def _extensions():
    """Subcommands that live in their own modules (profile, trace, bench)."""
    import importlib

    for name in (
        "maxkernel.tpu_tools.cli.profile",
        "maxkernel.tpu_tools.cli.bench",
        "maxkernel.tpu_tools.cli.examples",
        "maxkernel.tpu_tools.cli.analyze",
        "maxkernel.tpu_tools.cli.model",
        "maxkernel.tpu_tools.cli.port",
    ):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        yield module.register


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from maxkernel.tpu_tools.pool.sandbox import SandboxUnavailable

    if getattr(args, "require_sandbox", False):
        os.environ["MAXKERNEL_REQUIRE_SANDBOX"] = "1"  # read by the worker pool when it starts
    try:
        _check_inputs(args)
        with cli_args.quiet_broken_pipe():
            return args.func(args)
    except (UsageError, SandboxUnavailable) as e:
        print(f"maxkernel: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if (why := cli_args.name_too_long(e)) is None:
            raise
        print(f"maxkernel: {why}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maxkernel: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
