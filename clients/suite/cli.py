"""`maxkernel-orchestrate suite`: the Auto loop or a search over many JaxBench tasks, scored as one table.

    maxkernel-orchestrate suite --reference 8p,12p --mode auto --model offline --concurrency 2
    maxkernel-orchestrate suite --resume runs/suite-20260101-120000

Exit status: 0 every task finished and is correct, 1 some task is not, 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError as BaseUsageError

USAGE_EXIT, NOT_ALL_CORRECT_EXIT = 2, 1


class UsageError(ValueError):
    pass


class NoServer(RuntimeError):
    """No server could be reached (exit 1, one line)."""


def register(sub: Any) -> None:
    from maxkernel.clients.models.registry import add_model
    from maxkernel.tpu_tools.cli import args as cli_args

    s = sub.add_parser("suite", help="run auto or search over many JaxBench tasks and score them")
    s.add_argument(
        "--reference",
        default="all",
        help="'all', comma-separated task ids (8p,12p_RMSNorm,…), or a folder of PyTorch sources (ported first)",
    )
    s.add_argument("--mode", choices=["auto", "search"], default="auto")
    add_model(s)
    cli_args.add_target(s)
    cli_args.add_size(s)
    cli_args.add_check_sizes(s)
    s.add_argument("--concurrency", type=int, default=2, help="tasks (and evaluations) in flight")
    cli_args.add_server(s)
    cli_args.add_engine(s)
    cli_args.add_run_dir(s, help_text="suite directory (default: runs/suite-<time>)")
    s.add_argument(
        "--resume", metavar="SUITE_DIR", help="continue a suite: finished tasks kept, none repeated"
    )
    # A suite runs every task: its per-task budgets are smaller than one `auto` run's on purpose
    # (auto: --iterations 5, --test-cases 3; search: --max-evaluations 40), and --help says so.
    s.add_argument(
        "--iterations", type=int, default=1, help="auto: iterations per task (one `auto` run defaults to 5)"
    )
    s.add_argument(
        "--test-cases", type=int, default=2, help="auto: tester cases per task (one `auto` run defaults to 3)"
    )
    cli_args.add_seeds(s, offset=False)
    s.add_argument("--verify-seeds", type=int, default=4, help="fresh seeds of the final re-verify")
    s.add_argument("--algorithm", choices=["parallel", "beam", "evolve"], default="beam")
    s.add_argument("--max-usd", type=float, help="whole suite")
    s.add_argument("--max-minutes", type=float, help="whole suite")
    s.add_argument("--max-evaluations", type=int, help="whole suite")
    s.add_argument("--task-max-usd", type=float)
    s.add_argument("--task-max-minutes", type=float)
    s.add_argument(
        "--task-max-evaluations",
        type=int,
        default=12,
        help="search: per task (one `search` run's --max-evaluations defaults to 40)",
    )
    cli_args.add_json(s, "the score")
    s.add_argument("--quiet", action="store_true", help="no progress line or table")
    s.set_defaults(func=suite_main)


def _torch_sources(spec: str) -> list[Path]:
    """A folder of PyTorch/Triton sources (KernelBench format): each one a task, ported before the suite."""
    from maxkernel.tpu_tools.port.source import is_torch_source

    folder = Path(spec)
    sources = sorted(p for p in folder.glob("*.py") if is_torch_source(p) and not p.stem.endswith("_port"))
    if not sources:
        raise UsageError(
            f"--reference {spec}: a folder with no PyTorch source (Model(nn.Module), get_inputs)"
        )
    return sources


def _port_sources(folder: str, suite_dir: Path, seeds: int, note: Any) -> dict[str, str]:
    """Port every source into the suite's workspace: task -> its port (workspace path). A source that cannot be
    ported, or whose port is refused, is left out with its reason (the suite runs the rest)."""
    import shutil

    from maxkernel.clients.source_port import port_in_child

    workspace = suite_dir / "workspace"
    (workspace / "references").mkdir(parents=True, exist_ok=True)
    (suite_dir / "ports").mkdir(parents=True, exist_ok=True)
    refs: dict[str, str] = {}
    for src in _torch_sources(folder):
        shutil.copyfile(src, workspace / "references" / src.name)
        try:
            report = port_in_child(workspace, f"references/{src.name}", seeds)
        except BaseUsageError as e:
            note(f"{src.stem}: left out: {e}")
            continue
        (suite_dir / "ports" / f"{src.stem}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        if report.get("ok"):
            refs[src.stem] = str((workspace / report["workspace_port"]).resolve())  # a file here and there
            note(f"{src.stem}: {report.get('summary')}")
        else:
            note(f"{src.stem}: left out: {report.get('summary')}")
    if not refs:
        raise UsageError(f"--reference {folder}: no source could be ported")
    return refs


def jax_references(spec: str) -> dict[str, str]:
    """A folder of JAX reference files, each a task named by its file (or, in level 2's layout
    `<task>/baseline.py`, by its folder): level 2 as cloned, or a user's own set. Empty when it holds none."""
    folder = Path(spec)
    found = {p.parent.name: p for p in sorted(folder.glob("*/baseline.py"))}
    for p in sorted(folder.glob("*.py")):
        text = p.read_text(encoding="utf-8", errors="replace")
        if "def create_inputs" in text and ("def workload" in text or "def computation" in text):
            found.setdefault(p.stem, p)
    return {name: str(p.resolve()) for name, p in found.items()}


def _task_ids(spec: str) -> list[str]:
    from maxkernel.jaxbench import registry
    from maxkernel.tpu_tools.problem.reference import present

    if present(spec, folder=True):  # a folder of sources (35 task ids make a 1 KB name: not one)
        if refs := jax_references(spec):
            return list(refs)
        return [p.stem for p in _torch_sources(spec)]
    if spec == "all":
        return registry.list_task_ids()
    try:
        ids = [registry.resolve_id(t.strip()) for t in spec.split(",") if t.strip()]
    except registry.UnknownTaskError as e:
        raise UsageError(str(e)) from None
    if not ids:
        raise UsageError("--reference names no task: give 'all' or ids like 8p,12p")
    return list(dict.fromkeys(ids))


def _settings(args: argparse.Namespace):
    from maxkernel.clients.models.registry import default_model_spec
    from maxkernel.clients.suite.runner import SuiteSettings
    from maxkernel.tpu_tools.hardware.targets import TARGET_NAMES

    if args.target not in TARGET_NAMES:
        raise UsageError(f"unknown --target {args.target!r}: one of {', '.join(TARGET_NAMES)}")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency should be at least 1, got {args.concurrency}")
    for flag in ("max_usd", "max_minutes", "max_evaluations", "task_max_usd", "task_max_minutes"):
        v = getattr(args, flag)
        if v is not None and v < 0:
            raise UsageError(f"--{flag.replace('_', '-')} should be >= 0, got {v}")
    tasks = _task_ids(args.reference)
    if args.size is not None or args.check_sizes:
        for task in tasks:
            cli_args.check_size_names(task, args.size, args.check_sizes)
    try:
        return SuiteSettings(
            tasks=tasks,
            mode=args.mode,
            model=args.model or default_model_spec(),
            target=args.target,
            # unset: the grammar's default, the production size, which is full for every JaxBench task
            **cli_args.size_kwargs(args.size),
            check_sizes=args.check_sizes,
            concurrency=args.concurrency,
            iterations=args.iterations,
            test_cases=args.test_cases,
            seeds=args.seeds,
            verify_seeds=args.verify_seeds,
            algorithm=args.algorithm,
            task_max_evaluations=args.task_max_evaluations,
            task_max_usd=args.task_max_usd,
            task_max_minutes=args.task_max_minutes,
            max_usd=args.max_usd,
            max_minutes=args.max_minutes,
            max_evaluations=args.max_evaluations,
        )
    except ValueError as e:  # pydantic: one line naming the field
        first = str(e).splitlines()
        raise UsageError(
            f"bad suite setting: {' '.join(first[1:3]) if len(first) > 2 else first[0]}"
        ) from None


def _specs(args: argparse.Namespace, suite_dir: Path, concurrency: int) -> list[Any]:
    from maxkernel.clients.mcp_client import http_transport, stdio_params

    if not args.server:
        (suite_dir / "workspace").mkdir(parents=True, exist_ok=True)
        return [stdio_params(str(suite_dir / "workspace"), max_workers=max(1, concurrency))]
    from maxkernel.tpu_tools.cli import args as cli_args

    token = cli_args.server_token(args)
    specs = []
    for url in args.server:
        if url.startswith(("http://", "https://")):
            specs.append((http_transport(url, token), url))
        elif url.startswith("stdio:"):
            specs.append(url)
        else:
            raise UsageError(f"--server {url!r}: give an http(s)://host:port/mcp URL or 'stdio:COMMAND ARGS'")
    return specs


async def run_suite(
    args: argparse.Namespace, servers: list[Any] | None = None, settings: Any = None
) -> dict[str, Any]:
    """Run (or resume) a suite; `servers` overrides --server (tests pass in-process server objects or
    evaluators); `settings` overrides the ones made from `args` (a model run's suite over its regions).
    The servers are connected before a new suite directory is created."""
    from contextlib import AsyncExitStack

    from maxkernel.clients.fleet.servers import Dispatcher
    from maxkernel.clients.mcp_client import _root_cause
    from maxkernel.clients.models import registry
    from maxkernel.clients.search.evaluator import EvaluatorDown
    from maxkernel.clients.search.remote import MCPEvaluator
    from maxkernel.clients.suite.report import print_table, write_all
    from maxkernel.clients.suite.runner import (
        SuiteProgress,
        SuiteResult,
        SuiteRunner,
        SuiteSettings,
        score_rows,
    )
    from maxkernel.clients.suite.store import SuiteStore

    started = time.monotonic()
    cli_args.check_engine(args)
    if args.resume:
        suite_dir = Path(args.resume)
        if not SuiteStore.exists(suite_dir):
            raise UsageError(f"{suite_dir} is not a suite directory to resume (no suite.sqlite in it)")
        peek = SuiteStore(suite_dir, requeue=False)
        settings = SuiteSettings.model_validate(peek.get_meta("settings"))
        peek.close()
    else:
        settings = settings if settings is not None else _settings(args)
        suite_dir = Path(args.run_dir or f"runs/suite-{time.strftime('%Y%m%d-%H%M%S')}")
        if SuiteStore.exists(suite_dir):
            raise UsageError(f"{suite_dir} already holds a suite: continue it with --resume {suite_dir}")
        from maxkernel.tpu_tools.problem.reference import present

        # a folder of JAX references (level 2 as cloned): each file is a task as it stands
        if (
            present(args.reference, folder=True)
            and not settings.references
            and jax_references(args.reference)
        ):
            refs = jax_references(args.reference)
            settings = settings.model_copy(update={"tasks": list(refs), "references": refs})
        # a folder of PyTorch sources: port them first
        if present(args.reference, folder=True) and not settings.references:
            if args.server:
                raise UsageError(
                    "a folder of PyTorch sources is ported here, for local servers: drop --server"
                )
            quiet = args.quiet or args.json
            refs = _port_sources(
                args.reference,
                suite_dir,
                args.seeds,
                lambda line: None if quiet else print(line, file=sys.stderr),
            )
            settings = settings.model_copy(update={"tasks": list(refs), "references": refs})
    async with AsyncExitStack() as stack:
        ray_engine = getattr(args, "engine", "local") == "ray" and servers is None
        specs = (
            []
            if ray_engine
            else servers
            if servers is not None
            else _specs(args, suite_dir, settings.concurrency)
        )
        evaluators: list[Any] = []
        unreachable: list[str] = []
        dispatcher: Any = None
        if ray_engine:
            dispatcher = _open_ray(args, settings)
            stack.callback(dispatcher.close)
        for spec in specs:
            if hasattr(spec, "evaluate") and hasattr(spec, "call"):  # already an evaluator (tests' fakes)
                evaluators.append(spec)
                continue
            target, name = spec if isinstance(spec, tuple) else (spec, None)
            try:
                evaluators.append(await stack.enter_async_context(MCPEvaluator(target, name=name)))
            except EvaluatorDown as e:
                where = name or (spec if isinstance(spec, str) else "in-process server")
                unreachable.append(f"{where}: {_root_cause(e.__cause__ or e)}")
        if not evaluators and dispatcher is None:  # before a new suite directory exists: nothing on disk
            raise NoServer(f"no server reachable: {'; '.join(unreachable)}")
        store = SuiteStore(suite_dir)
        if not args.resume:
            store.set_meta("settings", settings.model_dump(mode="json"))
            store.add_tasks(settings.tasks)
        done_rows = [r for r in store.rows() if r.status in ("done", "failed")]
        progress = SuiteProgress(
            len(store.statuses()),
            len(done_rows),
            sum(r.correct for r in done_rows),
            enabled=not (args.quiet or args.json),
        )
        stack.enter_context(progress)
        for line in unreachable:
            progress.note(f"server skipped: {line}")
        if store.requeued:
            progress.note(
                f"resumed: {store.requeued} task(s) left running by the killed suite go again from their journals"
            )
        if dispatcher is None:
            dispatcher = Dispatcher(evaluators, settings.concurrency)
        progress.engine = dispatcher
        runner = SuiteRunner(
            store, settings, dispatcher, model_factory=registry.build_model, progress=progress
        )
        progress.note(f"suite directory: {suite_dir}  ({len(store.pending())} task(s) to run)")
        watcher = asyncio.ensure_future(progress.watch_fleet())
        try:
            stopped = await runner.run()
        finally:
            watcher.cancel()
        fleet = dispatcher.fleet()  # while the engine is connected: the hosts lost during the run
    rows, sc = score_rows(store)
    result = SuiteResult(
        suite_dir=str(suite_dir),
        settings=settings,
        rows=rows,
        score=sc,
        stopped=stopped,
        requeued_on_start=store.requeued,
        dead_servers=fleet.hosts_lost + [f"{u} (at start)" for u in unreachable],
        wall_time_s=round(time.monotonic() - started, 2),
    )
    meta = {"suite_dir": str(suite_dir), "settings": settings.model_dump(mode="json"), "stopped": stopped}
    files = write_all(suite_dir, rows, sc, meta)
    store.close()
    if not (args.quiet or args.json):
        print_table(rows, sc)
        progress.note(f"stopped: {stopped}; score: {files['json']}, {files['csv']}, {files['html']}")
    return result.model_dump(mode="json") | {"files": files}


def _open_ray(args: argparse.Namespace, settings: Any) -> Any:
    from maxkernel.clients.fleet.ray_engine import NoRayCluster, RayUnavailable, open_ray

    try:
        return open_ray(args, settings.concurrency, profile_target=settings.target)
    except NoRayCluster as e:  # no --ray-address and nothing running here: exit 2 with the recipe
        raise UsageError(str(e)) from None
    except RayUnavailable as e:
        raise NoServer(str(e)) from None


def suite_main(args: argparse.Namespace) -> int:
    import anyio

    try:
        out = anyio.run(run_suite, args)
    except (UsageError, BaseUsageError) as e:
        print(f"maxkernel-orchestrate suite: {e}", file=sys.stderr)
        return USAGE_EXIT
    except NoServer as e:
        print(f"maxkernel-orchestrate suite: {str(e)[:1000]}", file=sys.stderr)
        return NOT_ALL_CORRECT_EXIT
    except KeyboardInterrupt:
        print("maxkernel-orchestrate suite: interrupted; continue with --resume SUITE_DIR", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(out, indent=2))
    rows = out["rows"]
    return 0 if rows and all(r["correct"] for r in rows) else NOT_ALL_CORRECT_EXIT
