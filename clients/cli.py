"""`maxkernel-orchestrate`: drive models against maxkernel servers (the Auto loop).

    maxkernel-orchestrate auto --reference 12p_RMSNorm [--target tpu-v6e] [--model offline] [--iterations 5]
    maxkernel-orchestrate auto --resume runs/20260101-120000-12p_RMSNorm

By default a `maxkernel-server` is spawned over stdio with its workspace inside the run directory;
`--server URL` (repeatable) uses running servers instead, with `--token` or MAXKERNEL_TOKEN.
Exit status: 0 a verified kernel was found, 1 the run ended without one, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from maxkernel.clients.models import Budget, ModelConfigError, registry
from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError  # one class for the command line's mistakes

USAGE_EXIT, NO_KERNEL_EXIT = 2, 1
CLI_OPTIONS = "cli_options.json"  # how the run reached its servers, for --resume (the loop's own config is in state.json)
# options a run keeps from its start: --resume refuses a different value instead of ignoring it
RUN_OPTIONS = (
    "size",
    "check_sizes",
    "target",
    "iterations",
    "max_debug",
    "seeds",
    "no_profile",
    "test_cases",
    "autotune",
    "run_dir",
    "out",
)


def build_parser() -> argparse.ArgumentParser:
    from maxkernel.clients.models.registry import add_model

    p = cli_args.parser("maxkernel-orchestrate", __doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("auto", help="plan, implement, debug, validate and profile kernels for a reference")
    cli_args.add_reference(a)
    cli_args.add_target(a)
    cli_args.add_size(a)
    cli_args.add_check_sizes(a)
    add_model(a)
    a.add_argument("--iterations", type=int, default=5, help="plan -> ... -> analyze rounds")
    a.add_argument("--max-debug", type=int, default=3, help="debugger attempts per iteration")
    cli_args.add_seeds(a, offset=False)
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
    cli_args.add_run_dir(a, help_text="the run's directory (default: runs/<time>-<reference>)")
    a.add_argument("--out", default="runs", help=argparse.SUPPRESS)  # old spelling: the run dir's parent
    a.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run from its last finished step, with its options"
    )
    cli_args.add_server(a)
    a.add_argument("--workspace", help="workspace of the spawned stdio server (default: RUN_DIR/workspace)")
    a.add_argument("--max-usd", type=float, help="stop cleanly after this much model spend")
    a.add_argument("--max-tokens", type=int, help="stop cleanly after this many model tokens")
    a.add_argument("--max-minutes", type=float, help="stop cleanly after this many minutes")
    cli_args.add_json(a, "summary.json")
    a.add_argument("--quiet", action="store_true", help="no progress lines")
    from maxkernel.clients.search.cli import register as register_search

    register_search(sub)  # `search` and `report` verbs
    from maxkernel.clients.suite.cli import register as register_suite

    register_suite(sub)  # `suite`
    from maxkernel.clients.model.cli import register as register_model

    register_model(sub)  # `model`
    return p


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> None:
    """Every mistake on the command line is found here, before a run directory or a server exists."""
    reference = cli_args.take_reference(args)
    if args.resume:
        if reference:
            raise UsageError("--resume continues a run as it was started: drop --reference")
        from maxkernel.clients.run_store import RunStore, RunStoreError

        try:
            RunStore.open(args.resume)
        except RunStoreError as e:
            raise UsageError(str(e)) from None
        defaults = _auto_defaults(parser)
        changed = [o for o in RUN_OPTIONS if getattr(args, o) != defaults.get(o)]
        if changed:
            flags = ", ".join("--" + o.replace("_", "-") for o in changed)
            raise UsageError(f"--resume continues a run with the options it started with: drop {flags}")
        return
    if not reference:
        raise UsageError("give the reference: --reference ID|PATH (a JaxBench task id or a reference file)")
    args.reference = cli_args.check_reference(reference, remote=bool(args.server))
    if args.iterations < 1:
        raise UsageError(f"--iterations should be at least 1, got {args.iterations}")
    if not 0 <= args.test_cases <= 16:
        raise UsageError(f"--test-cases should be between 0 and 16, got {args.test_cases}")
    if args.max_debug < 0:
        raise UsageError(f"--max-debug should be >= 0, got {args.max_debug}")
    cli_args.check_target(args.target)
    cli_args.check_size_names(args.reference, args.size, args.check_sizes)
    for url in args.server:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--server {url!r}: give the server's URL, http(s)://HOST:PORT/mcp")
    for flag in ("max_usd", "max_tokens", "max_minutes"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise UsageError(f"--{flag.replace('_', '-')} should be >= 0, got {value}")
    if args.run_dir:
        cli_args.check_new_run_dir(args.run_dir)


def _auto_defaults(parser: argparse.ArgumentParser | None) -> dict:
    auto = (parser or build_parser())._subparsers._group_actions[0].choices["auto"]  # type: ignore[union-attr]
    return {a.dest: a.default for a in auto._actions}


def _is_task_id(reference: str) -> bool:
    from maxkernel.jaxbench.registry import UnknownTaskError, resolve_id

    try:
        return resolve_id(reference) == reference and not Path(reference).exists()
    except UnknownTaskError:
        return False


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


def _new_store(args: argparse.Namespace, label: str):
    from maxkernel.clients.run_store import RunStore

    if args.run_dir:
        root = Path(args.run_dir)
        root.mkdir(parents=True, exist_ok=True)
        return RunStore(root)
    return RunStore.create(args.out, label)


def _resume_budget(saved: Budget, args: argparse.Namespace) -> Budget:
    """Budgets are the one thing a resumed run may change: how much more it may spend."""
    given = {
        k: getattr(args, k) for k in ("max_usd", "max_tokens", "max_minutes") if getattr(args, k) is not None
    }
    return saved.model_copy(update=given) if given else saved


async def run_auto(args: argparse.Namespace, server_factory=None) -> dict:
    """Set up the store, model and servers, then run (or resume) the loop; return summary.json."""
    from maxkernel.clients.auto.loop import AutoConfig, AutoLoop
    from maxkernel.clients.auto.source import port_first, source_parity
    from maxkernel.clients.mcp_client import KernelServerClient, ServerUnavailable
    from maxkernel.clients.progress import NullReporter, RichReporter
    from maxkernel.clients.run_store import STATE_FILE, RunStore, RunStoreError
    from maxkernel.tpu_tools.port.source import is_torch_source

    if args.resume:
        try:
            store = RunStore.open(args.resume)
        except RunStoreError as e:
            raise UsageError(str(e)) from None
        saved = json.loads(store.load_state_json())["config"]
        model_spec = args.model or saved["model"]
        started_with = (
            json.loads(store.path(CLI_OPTIONS).read_text()) if store.path(CLI_OPTIONS).is_file() else {}
        )
        args.workspace = args.workspace or started_with.get("workspace")  # the staged reference lives there
        args.server = args.server or started_with.get("server", [])  # a host may be replaced, not dropped
    else:
        from maxkernel.clients.models import default_model_spec

        model_spec = args.model or default_model_spec()
    try:
        model = registry.build_model(model_spec)
    except ModelConfigError as e:
        raise UsageError(str(e)) from None
    token = cli_args.server_token(args)
    if server_factory is None and args.server:
        from maxkernel.clients.connect import check_auth

        for url in args.server:  # a refused token is the caller's mistake: say so before creating anything
            check_auth(url, token)
    reference = args.reference
    task_id = not args.resume and _is_task_id(reference)
    fresh = not args.resume
    if fresh:
        created = cli_args.first_missing(Path(args.run_dir or args.out))
        store = _new_store(args, reference if task_id else Path(reference).stem)
        if not args.run_dir and created is None:
            created = store.root
        store.write_json(
            CLI_OPTIONS,
            {
                "workspace": str(Path(args.workspace).absolute()) if args.workspace else None,
                "server": list(args.server),  # never the token: it stays in the flag or the environment
            },
        )

    reporter = NullReporter() if args.quiet else RichReporter()
    workspace = Path(args.workspace) if args.workspace else store.root / "workspace"
    ported = None
    try:
        if fresh and not task_id and is_torch_source(reference):  # port it first, checked against it
            if args.server:
                raise UsageError("a PyTorch source is ported here, for a local server: drop --server")
            workspace.mkdir(parents=True, exist_ok=True)
            ported = port_first(store, workspace, _stage_reference(reference, workspace), args.seeds)
        async with AsyncExitStack() as stack:
            if server_factory is not None:
                clients = [server_factory(workspace)]
            elif args.server:
                clients = [KernelServerClient.http(url, token) for url in args.server]
            else:
                workspace.mkdir(parents=True, exist_ok=True)
                clients = [KernelServerClient.stdio(str(workspace))]
            for c in clients:
                await stack.enter_async_context(c)

            if args.resume:
                loop = AutoLoop.resume(model, clients, store, reporter=reporter)
                loop.state.config.budget = _resume_budget(loop.state.config.budget, args)
                if args.model:
                    loop.state.config.model = model_spec
            else:
                spec, server_reference = "", reference
                if not task_id:
                    local = Path(reference)
                    spec = local.read_text(encoding="utf-8") if local.is_file() else ""
                    if not args.server:
                        server_reference = _stage_reference(reference, workspace)
                    if ported is not None:  # a PyTorch/Triton source: the port is the loop's reference
                        server_reference = ported["workspace_port"]
                        spec = (workspace / server_reference).read_text(encoding="utf-8")
                config = AutoConfig(
                    task=reference if task_id else Path(reference).stem,
                    reference=server_reference,
                    task_spec=f"Reference module (the kernel must match it):\n```python\n{spec}\n```"
                    if spec
                    else "",
                    target=args.target,
                    size=args.size,
                    check_sizes=args.check_sizes,
                    iterations=args.iterations,
                    max_debug=args.max_debug,
                    seeds=args.seeds,
                    model=model_spec,
                    budget=Budget(
                        max_usd=args.max_usd, max_tokens=args.max_tokens, max_minutes=args.max_minutes
                    ),
                    profile=not args.no_profile,
                    test_cases=args.test_cases,
                    autotune=args.autotune,
                )
                loop = AutoLoop.start(model, clients, store, config, reporter=reporter)
            reporter.note(f"run directory: {store.root}")
            summary = await loop.run()
            # a ported PyTorch source: the best kernel against the source itself (a no-op otherwise)
            return await source_parity(clients[0], store, summary, args.seeds)
    except (UsageError, ServerUnavailable):
        if fresh and created is not None and not (store.root / STATE_FILE).exists():
            shutil.rmtree(created, ignore_errors=True)  # nothing ran: leave nothing behind
        raise
    finally:
        reporter.close()


def _print_summary(summary: dict) -> None:
    best = summary.get("best")
    lines = [f"stop: {summary['stop_reason']}", f"run: {summary['run_dir']}"]
    if best:
        lines.insert(0, f"best: iteration {best['iteration']} ({best['label']}) -> {best['path']}")
        if best.get("target_size"):
            t = best.get("time_us")
            timed = (
                f"{t:.4g} µs ({best['time_basis']})"
                if t is not None
                else "no time (nothing measured or estimated)"
            )
            checked = ", ".join(best.get("validated_at") or []) or "no check size"
            lines.insert(1, f"at the target size {best['target_size']!r}: {timed}; validated at {checked}")
        if best.get("numerics"):
            lines.insert(2, f"numerics: {best['numerics']}")
        if best.get("parts"):
            lines.insert(3, f"parts: {best['parts']}")
    else:
        lines.insert(0, "best: no kernel compiled and validated")
    if summary.get("port"):
        port = summary["port"]
        lines.append(f"port: {port['path']} ({port['check']}) from {port['source']}")
    if summary.get("source_parity"):
        lines.append(f"source parity: {summary['source_parity']['summary']}")
    s = summary["spend"]
    lines.append(
        f"spend: ${s['usd']:.4f}, {s['input_tokens'] + s['output_tokens']:,} tokens, {s['calls']} calls"
    )
    if best and best.get("target_size"):  # last: the kernel beside XLA, both with their tiers
        lines.append(best.get("vs_xla_line") or _no_xla_line(best, summary.get("target", "")))
    print("\n".join(lines), file=sys.stderr)


def _no_xla_line(best: dict, target: str) -> str:
    """The kernel's time alone, and why: no XLA time for the same reference on the target came back."""
    t = best.get("time_us")
    kernel = f"kernel {t:.4g} µs ({best['time_basis']})" if t is not None else "kernel: no time"
    return f"{kernel}; no XLA time for the same reference on {target} (its profile has none): no ratio"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args, parser)
    except OSError as e:  # a name the OS refuses (a list of ids given as a path): one line, whichever verb
        if (why := cli_args.name_too_long(e)) is None:
            raise
        print(f"maxkernel-orchestrate: {why}", file=sys.stderr)
        return USAGE_EXIT


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import anyio

    if hasattr(args, "func"):  # verbs that live in their own modules (search, report)
        return args.func(args)
    try:
        _check(args, parser)
        summary = anyio.run(run_auto, args)
        with cli_args.quiet_broken_pipe():
            if args.json:
                print(json.dumps(summary, indent=2))
            else:
                _print_summary(summary)
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
    return 0 if summary.get("best") else NO_KERNEL_EXIT


if __name__ == "__main__":
    sys.exit(main())
