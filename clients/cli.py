"""`maxkernel-orchestrate`: drive models against maxkernel servers (the Auto loop).

    maxkernel-orchestrate auto --task 12p_RMSNorm [--target tpu-v6e] [--model offline] [--iterations 5]
    maxkernel-orchestrate auto --resume runs/20260101-120000-12p_RMSNorm

By default a `maxkernel-server` is spawned over stdio with its workspace inside the run directory;
`--server URL` (repeatable) uses running servers instead, with `--token` or MAXKERNEL_TOKEN.
Exit status: 0 a verified kernel was found, 1 the run ended without one, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from maxkernel.clients.models import Budget, Model, ModelConfigError

USAGE_EXIT, NO_KERNEL_EXIT = 2, 1


class UsageError(Exception):
    """The command line asks for something impossible; the message says how to fix it."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maxkernel-orchestrate", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("auto", help="plan, implement, debug, validate and profile kernels for a task")
    a.add_argument("--task", help="JaxBench task id, e.g. 12p_RMSNorm")
    a.add_argument("--reference", help="your own reference module (maxkernel reference format)")
    a.add_argument("--size", choices=["small", "full"], default="small")
    a.add_argument("--target", default="tpu-v6e", help="tpu-v4|tpu-v5e|tpu-v5p|tpu-v6e|tpu-7x|cpu")
    a.add_argument(
        "--model", help="offline, gemini-<version> or openai:<model> (default: gemini if a key is set)"
    )
    a.add_argument("--iterations", type=int, default=5)
    a.add_argument("--max-debug", type=int, default=3, help="debugger attempts per iteration")
    a.add_argument("--seeds", type=int, default=3, help="fresh input seeds per validation")
    a.add_argument("--no-profile", action="store_true", help="skip profiling (rank nothing, keep the first)")
    a.add_argument(
        "--test-cases",
        type=int,
        default=3,
        metavar="N",
        help="tester's extra input cases per attempt (0: none)",
    )
    a.add_argument(
        "--autotune", action="store_true", help="sweep the verified kernel's tunables after each analysis"
    )
    a.add_argument("--out", default="runs", help="parent of the run directory (default runs/)")
    a.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last finished step")
    a.add_argument(
        "--server", action="append", default=[], metavar="URL", help="a running server (repeatable)"
    )
    a.add_argument("--token", help="bearer token for --server (else env MAXKERNEL_TOKEN)")
    a.add_argument("--workspace", help="workspace of the spawned stdio server (default: RUN_DIR/workspace)")
    a.add_argument("--max-usd", type=float)
    a.add_argument("--max-tokens", type=int)
    a.add_argument("--max-minutes", type=float)
    a.add_argument("--json", action="store_true", help="print summary.json to stdout")
    a.add_argument("--quiet", action="store_true", help="no progress lines")
    from maxkernel.clients.search.cli import register as register_search

    register_search(sub)  # `search` and `report` verbs
    from maxkernel.clients.suite_cli import register as register_suite

    register_suite(sub)  # `suite`
    return p


def build_model(spec: str) -> Model:
    """The model behind `--model`, with transient-failure retries (tests replace this function)."""
    from maxkernel.clients.models import get_model, with_retries

    return with_retries(get_model(spec))


def _check(args: argparse.Namespace) -> None:
    if args.resume:
        if args.task or args.reference:
            raise UsageError("--resume continues a run as it was started: drop --task/--reference")
        return
    if bool(args.task) == bool(args.reference):
        raise UsageError("give exactly one of --task ID or --reference FILE")
    if args.reference and not args.server and not Path(args.reference).exists():
        raise UsageError(f"reference file not found: {args.reference}")
    if args.iterations < 1:
        raise UsageError(f"--iterations should be at least 1, got {args.iterations}")
    if not 0 <= args.test_cases <= 16:
        raise UsageError(f"--test-cases should be between 0 and 16, got {args.test_cases}")
    if args.max_debug < 0:
        raise UsageError(f"--max-debug should be >= 0, got {args.max_debug}")
    if not 1 <= args.seeds <= 16:
        raise UsageError(f"--seeds should be between 1 and 16, got {args.seeds}")
    from maxkernel.tpu_tools.targets import TARGET_NAMES

    if args.target not in TARGET_NAMES:
        raise UsageError(f"unknown --target {args.target!r}: one of {', '.join(TARGET_NAMES)}")
    for flag in ("max_usd", "max_tokens", "max_minutes"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise UsageError(f"--{flag.replace('_', '-')} should be >= 0, got {value}")


def _stage_reference(reference: str, workspace: Path) -> str:
    """Copy a local reference into the spawned server's workspace; return its workspace path."""
    src = Path(reference).expanduser().resolve()
    dest = workspace / "references" / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True)
    else:
        shutil.copyfile(src, dest)
    return f"references/{src.name}"


async def run_auto(args: argparse.Namespace, server_factory=None) -> dict:
    """Set up the store, model and servers, then run (or resume) the loop; return summary.json."""
    from maxkernel.clients.auto import AutoConfig, AutoLoop
    from maxkernel.clients.mcp_client import KernelServerClient
    from maxkernel.clients.progress import NullReporter, RichReporter
    from maxkernel.clients.run_store import RunStore, RunStoreError

    reporter = NullReporter() if args.quiet else RichReporter()
    if args.resume:
        try:
            store = RunStore.open(args.resume)
        except RunStoreError as e:
            raise UsageError(str(e)) from None
        saved = json.loads(store.load_state_json())["config"]
        model_spec = args.model or saved["model"]
    else:
        from maxkernel.clients.models import default_model_spec

        model_spec = args.model or default_model_spec()
    try:
        model = build_model(model_spec)
    except ModelConfigError as e:
        raise UsageError(str(e)) from None
    if not args.resume:
        store = RunStore.create(args.out, args.task or Path(args.reference).stem)

    workspace = Path(args.workspace) if args.workspace else store.root / "workspace"
    async with AsyncExitStack() as stack:
        if server_factory is not None:
            clients = [server_factory(workspace)]
        elif args.server:
            token = args.token or os.environ.get("MAXKERNEL_TOKEN")
            clients = [KernelServerClient.http(url, token) for url in args.server]
        else:
            workspace.mkdir(parents=True, exist_ok=True)
            clients = [KernelServerClient.stdio(str(workspace))]
        for c in clients:
            await stack.enter_async_context(c)

        if args.resume:
            loop = AutoLoop.resume(model, clients, store, reporter=reporter)
        else:
            reference, spec = args.task, ""
            if args.reference:
                spec = (
                    Path(args.reference).read_text(encoding="utf-8") if Path(args.reference).is_file() else ""
                )
                reference = args.reference if args.server else _stage_reference(args.reference, workspace)
            config = AutoConfig(
                task=args.task or Path(args.reference).stem,
                reference=reference,
                task_spec=f"Reference module (the kernel must match it):\n```python\n{spec}\n```"
                if spec
                else "",
                target=args.target,
                size=args.size,
                iterations=args.iterations,
                max_debug=args.max_debug,
                seeds=args.seeds,
                model=model_spec,
                budget=Budget(max_usd=args.max_usd, max_tokens=args.max_tokens, max_minutes=args.max_minutes),
                profile=not args.no_profile,
                test_cases=args.test_cases,
                autotune=args.autotune,
            )
            loop = AutoLoop.start(model, clients, store, config, reporter=reporter)
        reporter.note(f"run directory: {store.root}")
        return await loop.run()


def _print_summary(summary: dict) -> None:
    best = summary.get("best")
    lines = [f"stop: {summary['stop_reason']}", f"run: {summary['run_dir']}"]
    if best:
        lines.insert(0, f"best: iteration {best['iteration']} ({best['label']}) -> {best['path']}")
    else:
        lines.insert(0, "best: no kernel compiled and validated")
    s = summary["spend"]
    lines.append(
        f"spend: ${s['usd']:.4f}, {s['input_tokens'] + s['output_tokens']:,} tokens, {s['calls']} calls"
    )
    print("\n".join(lines), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    import anyio

    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "func"):  # verbs that live in their own modules (search, report)
        return args.func(args)
    try:
        _check(args)
        summary = anyio.run(run_auto, args)
    except UsageError as e:
        print(f"maxkernel-orchestrate: {e}", file=sys.stderr)
        return USAGE_EXIT
    except Exception as e:
        from maxkernel.clients.mcp_client import ServerUnavailable

        if not isinstance(e, ServerUnavailable):
            raise
        print(f"maxkernel-orchestrate: {e}", file=sys.stderr)
        return NO_KERNEL_EXIT
    except KeyboardInterrupt:
        print("maxkernel-orchestrate: interrupted; resume with --resume RUN_DIR", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    return 0 if summary.get("best") else NO_KERNEL_EXIT


if __name__ == "__main__":
    sys.exit(main())
