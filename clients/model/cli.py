"""`maxkernel-orchestrate model MODEL --top K --mode auto|search`: from a model step to kernels and back.

    maxkernel-orchestrate model llama3_8b_layer --top 2 --mode auto --target tpu-v5e --model offline
    maxkernel-orchestrate model --resume runs/model-20260101-120000-llama3_8b_layer

Exit status: 0 the composed step matches the model with at least one kernel in it, 1 it does not (or no
region got a valid kernel), 2 usage error (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.problem.sizes import DERIVED

USAGE_EXIT, NO_KERNEL_EXIT = 2, 1
MODEL_SIZES = (None, "small", "full")


def register(sub: Any) -> None:
    from maxkernel.clients.model.stages import RANKS
    from maxkernel.clients.models.registry import add_model

    p = sub.add_parser(
        "model", help="hotspots -> extract the top regions -> a suite over them -> compose -> one report"
    )
    p.add_argument(
        "model_ref", nargs="?", metavar="MODEL", help="a JaxBench model id or a model reference file"
    )
    p.add_argument("--top", type=int, default=3, metavar="K", help="how many regions to optimize")
    p.add_argument(
        "--rank",
        choices=RANKS,
        default="gain",
        help="how the K regions are chosen: gain = the time a perfect kernel could win (share of the "
        "step x (1 - 1/headroom)); share = share of the step",
    )
    p.add_argument("--mode", choices=["auto", "search"], default="auto")
    add_model(p)
    cli_args.add_target(p)
    cli_args.add_size(p)
    cli_args.add_check_sizes(p)
    p.add_argument("--concurrency", type=int, default=2, help="regions (and evaluations) in flight")
    cli_args.add_server(p)
    cli_args.add_engine(p)
    cli_args.add_run_dir(p, help_text="the run's directory (default: runs/model-<time>-<model>)")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a killed run: nothing it finished is repeated"
    )
    # per region, a suite's budgets (the suite's --help names one `auto` run's)
    p.add_argument(
        "--iterations", type=int, default=1, help="auto: iterations per region (one `auto` run defaults to 5)"
    )
    p.add_argument(
        "--test-cases",
        type=int,
        default=2,
        help="auto: tester cases per region (one `auto` run defaults to 3)",
    )
    cli_args.add_seeds(p, offset=False)
    p.add_argument("--task-max-evaluations", type=int, default=12, help="search: evaluations per region")
    cli_args.add_json(p, "the model report")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=model_main)


def check(args: argparse.Namespace) -> None:
    """Every mistake on the command line, before anything is written or a server started."""
    from maxkernel.clients.model.run import RUN_FILE

    cli_args.check_engine(args)
    if args.resume:
        if args.model_ref:
            raise UsageError("--resume continues a run as it was started: drop MODEL")
        if not (Path(args.resume) / RUN_FILE).is_file():
            raise UsageError(f"{args.resume} is not a model run to resume (no {RUN_FILE} in it)")
        args.llm = ""
        return
    if not args.model_ref:
        raise UsageError(
            "give the model: MODEL (a JaxBench model id, e.g. llama3_8b_layer, or a reference file)"
        )
    args.model_ref = cli_args.check_reference(args.model_ref)
    if args.top < 1:
        raise UsageError(f"--top should be at least 1, got {args.top}")
    cli_args.check_target(args.target)
    if not args.target.startswith("tpu-"):
        raise UsageError(
            f"a model run estimates the step on a TPU target (tpu-v5e, tpu-v6e, ...), got {args.target!r}"
        )
    if args.size not in MODEL_SIZES:
        raise UsageError(f"--size {args.size!r}: a model's target size is small or full")
    for name in args.check_sizes or []:  # the extracted regions' references have SIZES small and full
        if name not in (*filter(None, MODEL_SIZES), DERIVED):
            raise UsageError(f"--check-size {name!r}: a region's check sizes are small, full or derived")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency should be at least 1, got {args.concurrency}")
    if args.iterations < 1:
        raise UsageError(f"--iterations should be at least 1, got {args.iterations}")
    if not 0 <= args.test_cases <= 16:
        raise UsageError(f"--test-cases should be between 0 and 16, got {args.test_cases}")
    if args.task_max_evaluations < 1:
        raise UsageError(f"--task-max-evaluations should be at least 1, got {args.task_max_evaluations}")
    if args.run_dir:
        cli_args.check_new_run_dir(args.run_dir)
    from maxkernel.clients.models import default_model_spec

    args.llm = args.model or default_model_spec()


def model_main(args: argparse.Namespace) -> int:
    import anyio

    from maxkernel.clients.model.report import text
    from maxkernel.clients.model.run import dump, run_model
    from maxkernel.clients.suite.cli import NoServer
    from maxkernel.clients.suite.cli import UsageError as SuiteUsageError

    try:
        check(args)
        report = anyio.run(run_model, args)
    except (UsageError, SuiteUsageError) as e:
        print(f"maxkernel-orchestrate model: {e}", file=sys.stderr)
        return USAGE_EXIT
    except NoServer as e:
        print(f"maxkernel-orchestrate model: {str(e)[:1000]}", file=sys.stderr)
        return NO_KERNEL_EXIT
    except KeyboardInterrupt:
        print("maxkernel-orchestrate model: interrupted; continue with --resume RUN_DIR", file=sys.stderr)
        return 130
    with cli_args.quiet_broken_pipe():
        print(dump(report) if args.json else text(report))
    ok = report.composed is not None and report.composed.get("ok")
    return 0 if ok else NO_KERNEL_EXIT
