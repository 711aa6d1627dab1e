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

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.targets import TARGET_NAMES, UnknownTargetError, parse_target


def _print_json(model: BaseModel | list) -> None:
    if isinstance(model, list):
        print(json.dumps([m.model_dump(mode="json") for m in model], indent=2))
    else:
        print(model.model_dump_json(indent=2))


def _check_inputs(args) -> None:
    """Catch the caller's mistakes before any child starts (cheap, no jax import)."""
    if hasattr(args, "kernel") and not Path(args.kernel).is_file():
        raise UsageError(f"kernel file not found: {args.kernel}")
    if hasattr(args, "target"):
        try:
            parse_target(args.target)
        except UnknownTargetError as e:
            raise UsageError(str(e)) from None
    if getattr(args, "reference", None):
        if not Path(args.reference).exists():
            from maxkernel.jaxbench.registry import UnknownTaskError, resolve_id

            try:
                resolve_id(args.reference)
            except UnknownTaskError as e:
                hint = "reference file not found" if any(c in args.reference for c in "/\\.") else str(e)
                raise UsageError(
                    f"{hint}: {args.reference}" if hint.startswith("reference") else hint
                ) from None


def _verdict_exit(report) -> int:
    if report.failure is not None and report.failure.kind == "usage_error":
        print(f"maxkernel: {report.failure.summary}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


def cmd_compile(args) -> int:
    from maxkernel.tpu_tools.evaluate import Evaluator
    from maxkernel.tpu_tools.render import render_compile

    report = Evaluator(timeout_s=args.timeout).compile(args.kernel, args.reference, args.target, args.size)
    _print_json(report) if args.json else render_compile(report)
    return _verdict_exit(report)


def cmd_validate(args) -> int:
    from maxkernel.tpu_tools.evaluate import Evaluator
    from maxkernel.tpu_tools.render import render_validation

    report = Evaluator(timeout_s=args.timeout).validate(
        args.kernel,
        args.reference,
        args.target,
        args.size,
        seeds=args.seeds,
        seed_offset=args.seed_offset,
        atol=args.atol,
        rtol=args.rtol,
        allow_plain_jax=args.allow_plain_jax,
        allow_weak_check=args.allow_weak_check,
    )
    _print_json(report) if args.json else render_validation(report)
    return _verdict_exit(report)


def cmd_chips(args) -> int:
    from maxkernel.tpu_tools.chips import CHIPS
    from maxkernel.tpu_tools.render import render_chips

    _print_json(list(CHIPS.values())) if args.json else render_chips(list(CHIPS.values()))
    return 0


def cmd_tasks(args) -> int:
    from maxkernel.tpu_tools.render import render_tasks
    from maxkernel.tpu_tools.tasks import list_tasks

    tasks = list_tasks()
    _print_json(tasks) if args.json else render_tasks(tasks)
    return 0


def _add_eval_args(
    p: argparse.ArgumentParser, default_target: str, default_size: str | None = "small"
) -> None:
    p.add_argument("kernel", help="candidate kernel file exposing workload(*inputs)")
    p.add_argument(
        "--reference", "-r", required=True, help="JaxBench task id (e.g. 8p_GEMM) or reference file/dir"
    )
    p.add_argument("--target", "-t", default=default_target, help=f"one of {', '.join(TARGET_NAMES)}")
    p.add_argument(
        "--size",
        default=default_size,
        help=f"reference size (default: {default_size})"
        if default_size
        else "reference size (default: 'small' if the reference has it, else its only size)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="wall-clock limit per child process, seconds")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--require-sandbox",
        action="store_true",
        help="refuse to evaluate where no OS sandbox isolates the job",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maxkernel", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="trace, lower and compile a kernel for a target")
    _add_eval_args(p, "tpu-v6e", None)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("validate", help="check a kernel against the reference on several seeds")
    _add_eval_args(p, "cpu", None)
    p.add_argument("--seeds", type=int, default=3, help="input sets, at least 1 (default: 3)")
    p.add_argument(
        "--seed-offset",
        type=int,
        default=None,
        help="first seed (default: drawn at random; the verdict records it, pass it back to reproduce)",
    )
    p.add_argument("--atol", type=float)
    p.add_argument("--rtol", type=float)
    p.add_argument("--allow-plain-jax", action="store_true", help="accept candidates without a pallas_call")
    p.add_argument(
        "--allow-weak-check", action="store_true", help="accept when a trivial output would also pass"
    )
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("chips", help="TPU chip specs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_chips)

    p = sub.add_parser("tasks", help="the 50 JaxBench tasks")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tasks)

    for register in _extensions():
        register(sub)
    return parser


def _extensions():
    """Subcommands that live in their own modules (profile, trace, bench)."""
    import importlib

    for name in (
        "maxkernel.tpu_tools.cli_profile",
        "maxkernel.tpu_tools.cli_bench",
        "maxkernel.tpu_tools.cli_examples",
        "maxkernel.tpu_tools.cli_analyze",
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
    from maxkernel.tpu_tools.sandbox import SandboxUnavailable

    if getattr(args, "require_sandbox", False):
        os.environ["MAXKERNEL_REQUIRE_SANDBOX"] = "1"  # read by the worker pool when it starts
    try:
        _check_inputs(args)
        return args.func(args)
    except (UsageError, SandboxUnavailable) as e:
        print(f"maxkernel: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maxkernel: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
