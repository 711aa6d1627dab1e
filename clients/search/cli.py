"""`maxkernel-orchestrate search` and `maxkernel-orchestrate report`: the graph search from the shell.

`register(subparsers)` adds both verbs to the orchestrator's parser; each sets `func`, which returns
the exit code (0 found a kernel / wrote the report, 1 no valid kernel, 2 bad input).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError as BaseUsageError

USAGE_EXIT, NO_KERNEL_EXIT = 2, 1
OPTIONS_META = "cli_options"  # every option the search started with: --resume restores them
# what a resumed search may change: where it runs and how much more it may spend (never what it searches)
RESUME_MAY_CHANGE = (
    "server",
    "token",
    "engine",
    "ray_address",
    "profile_on",
    "concurrency",
    "max_evaluations",
    "max_usd",
    "max_minutes",
    "json",
    "quiet",
)


class UsageError(BaseUsageError, ValueError):
    pass


def register(sub: Any) -> None:
    from maxkernel.clients.models.registry import add_model

    s = sub.add_parser("search", help="graph search over candidate kernels (parallel, beam, evolve)")
    cli_args.add_reference(s, positional_alias=True)
    s.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a search with the options it started with: finished nodes are kept, none repeated",
    )
    cli_args.add_run_dir(s, help_text="where the graph lives (default: runs/search-<reference>-<time>)")
    s.add_argument("--algorithm", choices=["parallel", "beam", "evolve"], default="beam", help="search shape")
    s.add_argument("--strategy", action="append", default=[], help="catalogue name or free text (repeatable)")
    cli_args.add_server(s)
    cli_args.add_engine(s)
    s.add_argument("--workspace", help="workspace of the local stdio server (default: RUN_DIR/workspace)")
    s.add_argument(
        "--objective",
        choices=["server", "estimate"],
        default="server",
        help="'estimate': rank by the static estimate in-process, no validation (dry runs)",
    )
    s.add_argument(
        "--proposer",
        choices=["template", "model"],
        default=None,
        help="template: walk the reference's config space; model: ask --model "
        "(default: template if the reference has a space)",
    )
    add_model(s, " for --proposer model")
    s.add_argument("--root", help="a kernel file to start from (model proposer)")
    cli_args.add_target(s)
    cli_args.add_size(s)
    cli_args.add_check_sizes(s)
    cli_args.add_seeds(s, offset=False)
    s.add_argument("--concurrency", type=int, default=2, help="evaluations in flight")
    s.add_argument("--max-evaluations", type=int, default=40, help="evaluation budget")
    s.add_argument("--beam-size", type=int, default=2, help="beam: nodes kept per round")
    s.add_argument("--branches", type=int, default=3, help="beam: children per kept node")
    s.add_argument("--depth", type=int, default=6, help="beam: rounds")
    s.add_argument("--runs", type=int, default=4, help="parallel: independent chains")
    s.add_argument("--steps", type=int, default=6, help="parallel: steps per chain")
    s.add_argument("--islands", type=int, default=2, help="evolve: islands")
    s.add_argument("--population", type=int, default=6, help="evolve: population per island")
    s.add_argument("--generations", type=int, default=12, help="evolve: generations")
    s.add_argument("--seed", type=int, default=0, help="proposal randomness (replay-stable)")
    s.add_argument("--max-usd", type=float, help="stop cleanly after this much model spend")
    s.add_argument("--max-minutes", type=float, help="stop cleanly after this many minutes")
    s.add_argument(
        "--cache",
        help="evaluation cache file, shareable across runs (default: eval-cache.sqlite next to the run "
        "directory, e.g. runs/eval-cache.sqlite)",
    )
    cli_args.add_json(s, "the summary")
    s.add_argument("--quiet", action="store_true", help="no live progress line")
    s.set_defaults(func=search_main)

    r = sub.add_parser("report", help="write a self-contained HTML report of a search run")
    r.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a search run directory")
    r.add_argument("--run-dir", dest="run_dir_flag", metavar="DIR", help="the same, as a flag")
    r.add_argument("--html", dest="out", metavar="PATH", help="HTML path (default: RUN_DIR/report.html)")
    r.add_argument("--out", dest="out", help=argparse.SUPPRESS)  # old spelling of --html
    cli_args.add_json(r, "the summary (instead of the HTML page)")
    r.set_defaults(func=report_main)


def report_main(args: argparse.Namespace) -> int:
    from maxkernel.clients.search.report import summary, write_report
    from maxkernel.clients.search.store import GRAPH_FILE, GraphStore

    run_dir = args.run_dir or args.run_dir_flag
    prog = "maxkernel-orchestrate report"
    if not run_dir:
        print(f"{prog}: give the search run directory: report RUN_DIR", file=sys.stderr)
        return USAGE_EXIT
    if not (Path(run_dir) / GRAPH_FILE).is_file():
        print(f"{prog}: no {GRAPH_FILE} in {run_dir}: give a search run directory", file=sys.stderr)
        return USAGE_EXIT
    store = GraphStore(run_dir, requeue=False)
    try:
        if not store.get_meta("task"):
            print(f"{prog}: {run_dir} holds no search (no task recorded): nothing to report", file=sys.stderr)
            return USAGE_EXIT
        with cli_args.quiet_broken_pipe():
            if args.json:
                print(json.dumps(summary(store), indent=2))
            else:
                print(write_report(run_dir, args.out))
    except BaseUsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return USAGE_EXIT
    finally:
        store.close()
    return 0


def _settings(args: argparse.Namespace):
    from maxkernel.clients.search.algorithms import SearchSettings

    return SearchSettings(
        algorithm=args.algorithm,
        strategies=args.strategy,
        max_evaluations=args.max_evaluations,
        seed=args.seed,
        runs=args.runs,
        steps=args.steps,
        beam_size=args.beam_size,
        branches=args.branches,
        depth=args.depth,
        islands=args.islands,
        population=args.population,
        generations=args.generations,
    )


def reference_hash(reference: str) -> str:
    """Hash of the reference's text (a task's files, or the module), so an edited reference misses the cache."""
    from maxkernel.clients.search.graph import sha256_text
    from maxkernel.jaxbench import registry

    try:
        path = registry.task_path(registry.resolve_id(reference))
    except Exception:
        path = Path(reference)
    files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
    if not all(f.is_file() for f in files):
        raise UsageError(f"reference {reference!r} is neither a JaxBench task nor a file")
    return sha256_text("".join(f.read_text(encoding="utf-8") for f in files))


def _production_size(reference: str) -> str | None:
    """`full`, else the reference's largest size; None where only the server can load the reference (it
    then picks the same default)."""
    from maxkernel.tpu_tools.problem.reference import load_reference

    try:
        return load_reference(reference).default_size()[0]
    except Exception:  # noqa: BLE001 - a reference only the server sees: its default holds
        return None


def make_proposer(args: argparse.Namespace, reference: str, ledger, budget):
    """The proposer for `reference` (a JaxBench id or a local reference file)."""
    from maxkernel.clients.search.proposer import ModelProposer, TemplateProposer
    from maxkernel.clients.search.templates import space_for

    space = space_for(reference)
    kind = args.proposer or ("template" if space else "model")
    if kind == "template":
        if space is None:
            raise UsageError(f"no template space for {reference!r}: use --proposer model")
        from maxkernel.clients.search.tuned import cached_initial

        initial, line = cached_initial(space, args.target, reference, args.size or "full")
        print(f"search: {line}", file=sys.stderr)
        return TemplateProposer(space, initial)
    from maxkernel.clients.models import ModelConfigError, registry

    args.model = args.model or registry.default_model_spec()  # saved resolved: a resume keeps the model
    try:
        model = registry.build_model(args.model)
    except ModelConfigError as e:
        raise UsageError(str(e)) from None
    if args.root and not Path(args.root).is_file():
        raise UsageError(f"--root kernel file not found: {args.root}")
    root = Path(args.root).read_text(encoding="utf-8") if args.root else None
    return ModelProposer(
        model,
        task_spec=_reference_text(reference),  # the task text proper comes in prepare_proposer
        chip=args.target,
        ledger=ledger,
        budget=budget,
        root_source=root,
    )


def _reference_text(reference: str) -> str:
    """A reference file's opening of the task text, as the Auto loop writes it; "" for a JaxBench id
    (its summary and source come from get_task)."""
    from maxkernel.clients.task_text import source_text

    path = Path(reference)
    if not path.exists():
        return ""
    files = sorted(path.glob("*.py")) if path.is_dir() else [path]
    return source_text("\n\n".join(f.read_text(encoding="utf-8") for f in files))


async def prepare_proposer(proposer: Any, source: Any, reference: str, size: str | None) -> None:
    """A model proposer starts from the task text the Auto loop builds (summary, source, traced program),
    asked of `source`: the first evaluator's server, or this process for the estimate objective."""
    from maxkernel.clients.search.proposer import ModelProposer

    if isinstance(proposer, ModelProposer):
        await proposer.prepare(
            source, reference, size, note=lambda line: print(f"search: {line}", file=sys.stderr)
        )


def _stage(reference: str, workspace: Path) -> str:
    """A local reference copied into the stdio server's workspace; the server's path for it."""
    src = Path(reference).resolve()
    dest = workspace / "references" / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True)
    else:
        shutil.copyfile(src, dest)
    return f"references/{src.name}"


_DEFAULTS: dict[str, Any] = {}


def _search_defaults() -> dict[str, Any]:
    if not _DEFAULTS:
        import argparse

        sub = argparse.ArgumentParser().add_subparsers()
        register(sub)  # the search verb alone: its defaults are the ones `maxkernel-orchestrate search` shows
        search = sub.choices["search"]
        _DEFAULTS.update({a.dest: a.default for a in search._actions if a.dest != "help"})
    return _DEFAULTS


def _resumed_args(args: argparse.Namespace, saved: dict[str, Any]) -> argparse.Namespace:
    """The options the search started with; what the command line changes must be resumable, or an error."""
    defaults = _search_defaults()
    changed = [
        k
        for k, v in vars(args).items()
        if k in defaults
        and k not in RESUME_MAY_CHANGE
        and k != "resume"
        and v != defaults[k]
        and v != saved.get(k)
    ]
    if changed:
        flags = ", ".join(
            "--" + k.replace("_", "-") for k in sorted(changed) if not k.startswith("reference")
        )
        raise UsageError(
            f"--resume continues a search with the options it started with: drop {flags or '--reference'}"
        )
    merged = dict(saved)
    for k in RESUME_MAY_CHANGE:
        if k in vars(args) and getattr(args, k) != defaults.get(k):
            merged[k] = getattr(args, k)
    merged.update(resume=args.resume, func=args.func, token=getattr(args, "token", None))
    return argparse.Namespace(**merged)


def _saved_options(args: argparse.Namespace, run_dir: Path, local_reference: str) -> dict[str, Any]:
    skip = {"func", "command", "token", "resume", "reference_task", "reference_positional"}
    out = {k: v for k, v in vars(args).items() if k not in skip}
    out.update(
        run_dir=str(run_dir),
        local_reference=local_reference,
        cache=str(Path(args.cache).absolute())
        if args.cache
        else str((run_dir.parent / "eval-cache.sqlite").absolute()),
        workspace=str(Path(args.workspace).absolute())
        if args.workspace
        else str((run_dir / "workspace").absolute()),
        root=str(Path(args.root).absolute()) if args.root else None,
    )
    return out


def _check_numbers(args: argparse.Namespace) -> None:
    for flag in ("concurrency", "max_evaluations", "beam_size", "branches", "depth", "runs", "steps"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} should be >= 1, got {getattr(args, flag)}")
    for flag in ("islands", "population", "generations"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} should be >= 1, got {getattr(args, flag)}")
    for flag in ("max_usd", "max_minutes"):
        if getattr(args, flag) is not None and getattr(args, flag) < 0:
            raise UsageError(f"--{flag.replace('_', '-')} should be >= 0, got {getattr(args, flag)}")


async def run_search(args: argparse.Namespace, servers: list[Any] | None = None) -> dict[str, Any]:
    """Run (or resume) one search; `servers` overrides --server (tests pass in-process server objects).

    Every mistake is found before anything is created; a start that fails before the search runs
    removes what it created (the run directory, a new cache file). A PyTorch source is the one thing
    made before the checks end (its port decides the rest): a later mistake removes it too."""
    port_created: list[Path] = []
    try:
        return await _run_search(args, servers, port_created)
    except BaseException:
        for path in port_created:
            shutil.rmtree(path, ignore_errors=True)
        raise


async def _run_search(
    args: argparse.Namespace, servers: list[Any] | None, port_created: list[Path]
) -> dict[str, Any]:
    from contextlib import AsyncExitStack

    from maxkernel.clients.fleet.servers import Dispatcher
    from maxkernel.clients.models import Budget, Ledger
    from maxkernel.clients.search.algorithms import Search, SearchSettings
    from maxkernel.clients.search.evaluator import CachedEvaluator, EvalTask, EvaluatorDown
    from maxkernel.clients.search.remote import MCPEvaluator
    from maxkernel.clients.search.report import summary
    from maxkernel.clients.search.store import GRAPH_FILE, EvalCache, GraphStore

    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / GRAPH_FILE).is_file():
            raise UsageError(f"{run_dir} is not a search run directory to resume (no {GRAPH_FILE} in it)")
        peek = GraphStore(run_dir, requeue=False)
        saved, task_meta = peek.get_meta(OPTIONS_META), peek.get_meta("task")
        settings_meta = peek.get_meta("settings")
        peek.close()
        if not task_meta:
            raise UsageError(f"{run_dir} holds no search to resume")
        if cli_args.take_reference(args):
            raise UsageError("--resume continues a search as it was started: drop the reference")
        task = EvalTask.model_validate(task_meta)
        settings = SearchSettings.model_validate(settings_meta or {})
        if saved:
            args = _resumed_args(args, saved)
        if args.max_evaluations != _search_defaults()["max_evaluations"]:
            settings = settings.model_copy(update={"max_evaluations": args.max_evaluations})
        local_reference = (saved or {}).get("local_reference") or task.reference
        created: Path | None = None
        ported = None
    else:
        reference = cli_args.take_reference(args)
        if not reference:
            raise UsageError("give a reference (--reference ID|PATH), or --resume RUN_DIR")
        remote = bool(args.server) or servers is not None
        local_reference = cli_args.check_reference(reference, remote=remote)
        from maxkernel.tpu_tools.port.source import is_torch_source

        slug = Path(reference).stem if cli_args.looks_like_path(reference) else local_reference
        run_dir = Path(args.run_dir or f"runs/search-{slug[:40]}-{time.strftime('%Y%m%d-%H%M%S')}")
        ported = None
        if is_torch_source(local_reference):  # port it first, checked against it; the search runs on the port
            if remote or getattr(args, "engine", "local") == "ray":
                raise UsageError(
                    "a PyTorch source is ported here, for a local server: drop --server/--engine"
                )
            cli_args.check_target(args.target)
            cli_args.check_new_run_dir(run_dir)
            ported, local_reference = _port_first(args, reference, run_dir)
            port_created.extend([ported["created"]] if ported["created"] else [])
        cli_args.check_size_names(local_reference, args.size, args.check_sizes)
        if args.size is None:  # the target size: the reference's production size (tuning and ranking there)
            args.size = _production_size(local_reference)
        cli_args.check_target(args.target)
        settings = _settings(args)
        if ported is None:
            cli_args.check_new_run_dir(run_dir)
        task = None
    _check_numbers(args)
    cli_args.check_engine(args)
    use_ray = getattr(args, "engine", "local") == "ray" and servers is None and args.objective != "estimate"
    if use_ray and Path(local_reference).exists():
        raise UsageError(
            "--engine ray takes a JaxBench task id: a reference file here is not on the fleet's hosts"
        )
    for spec in args.server:
        if not spec.startswith(("http://", "https://", "stdio:")):
            raise UsageError(
                f"--server {spec!r}: give an http(s)://HOST:PORT/mcp URL or 'stdio:COMMAND ARGS'"
            )
    token = cli_args.server_token(args)
    specs: list[Any] = []
    if args.objective != "estimate":
        if servers is not None:
            specs = [(None, s) for s in servers]
        elif args.server:
            from maxkernel.clients.connect import http_servers

            specs = http_servers(args.server, token)  # a refused token: one line, before anything exists
    engine = (
        _open_ray(args) if use_ray else None
    )  # unreachable, or no host for the job: before anything exists
    ledger, budget = Ledger(), Budget(max_usd=args.max_usd, max_minutes=args.max_minutes)
    proposer = make_proposer(args, local_reference, ledger, budget)
    ref_hash = reference_hash(local_reference)

    if not args.resume:
        created = ported["created"] if ported else cli_args.first_missing(run_dir)
        port_created.clear()  # from here the start's own clean-up removes it
    cache_path = Path(args.cache or (run_dir.parent / "eval-cache.sqlite"))
    new_cache = cli_args.first_missing(cache_path)
    store = GraphStore(run_dir)
    started = False
    try:
        workspace = Path(args.workspace) if args.workspace else run_dir / "workspace"
        if task is None:
            server_reference = local_reference
            if ported is not None:  # already in the workspace, next to its source reference
                server_reference = ported["workspace_port"]
            elif Path(local_reference).exists() and not args.server and servers is None:
                server_reference = _stage(local_reference, workspace)
            task = EvalTask(
                reference=server_reference,
                target=args.target,
                profile_target=args.target,
                **cli_args.size_kwargs(args.size),
                check_sizes=tuple(args.check_sizes) if args.check_sizes else None,
                seeds=getattr(args, "seeds", cli_args.DEFAULT_SEEDS),
            )
            store.set_meta(OPTIONS_META, _saved_options(args, run_dir, local_reference))
            if ported is not None:
                from maxkernel.clients.source_port import port_brief

                store.set_meta("port", port_brief(ported))
        cache = EvalCache(cache_path)
        async with AsyncExitStack() as stack:
            if args.objective == "estimate":
                from maxkernel.clients.search.objective import EstimateEvaluator

                evaluators: list[Any] = [EstimateEvaluator(local_reference, task.target, task.size)]
            elif engine is None:
                if not specs:
                    specs = [(None, _local_stdio(args, workspace))]
                evaluators = [
                    await stack.enter_async_context(MCPEvaluator(spec, **({"name": name} if name else {})))
                    for name, spec in specs
                ]
            if args.objective == "estimate" or engine is not None:
                from maxkernel.clients.task_text import (
                    LocalTaskSource,  # a Ray run takes a task id: known here too
                )

                await prepare_proposer(proposer, LocalTaskSource(), local_reference, task.size)
            else:
                await prepare_proposer(proposer, evaluators[0], task.reference, task.size)
            if engine is not None:
                stack.callback(engine.close)
                dispatcher: Any = engine
            else:
                dispatcher = Dispatcher(evaluators, args.concurrency)
            cached = CachedEvaluator(dispatcher, cache, ref_hash)
            live = SearchProgress(
                cached,
                settings.max_evaluations,
                disable=args.json or getattr(args, "quiet", False),
                engine=dispatcher,
            )
            search = Search(
                store, live, proposer, task, settings, ledger=ledger, budget=budget, dispatcher=dispatcher
            )
            started = True
            with live:
                result = await search.run()
            fleet = dispatcher.fleet()  # while the engine is connected: the hosts lost during the run
    except (BaseUsageError, EvaluatorDown) as e:
        store.close()
        if engine is not None:
            engine.close()
        if not started:  # nothing was searched: leave nothing behind
            for path in (created, new_cache):
                if path is not None and path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
            if new_cache is not None and new_cache == cache_path:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{cache_path}{suffix}").unlink(missing_ok=True)
        if isinstance(e, EvaluatorDown):
            raise ServerDown(_connect_message(e)) from None
        raise
    if store.get_meta("port"):  # a ported PyTorch source: the best kernel against the source itself
        _source_parity(store, run_dir, workspace, result.best, getattr(args, "seeds", cli_args.DEFAULT_SEEDS))
    out = summary(store)
    if result.best is not None and result.reverified and result.best.config:  # the tuned-config cache
        from maxkernel.clients.search.templates import space_for
        from maxkernel.clients.search.tuned import record_best

        if (space := space_for(local_reference)) is not None:
            b = result.best
            record_best(
                space,
                task.target,
                local_reference,
                task.size or _production_size(local_reference) or "full",  # keyed by the target shapes
                b.config,
                b.time_us,
                b.time_label,
                "search",
            )
    out["dead_servers"] = fleet.hosts_lost
    out["engine"] = fleet.engine
    out["requeued_on_start"] = result.requeued_on_start
    store.close()
    cache.close()
    return out


def _port_first(args: argparse.Namespace, reference: str, run_dir: Path) -> tuple[dict, str]:
    """Port a PyTorch/Triton source into the run's workspace before any server starts (the report and the
    port cached in the run directory); a refused port is a UsageError that leaves nothing behind. Returns
    the port report (with `created`: what to remove if the start fails) and the port's local path."""
    from maxkernel.clients.source_port import port_into

    created = cli_args.first_missing(run_dir)
    workspace = Path(args.workspace) if args.workspace else run_dir / "workspace"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        workspace.mkdir(parents=True, exist_ok=True)
        if sys.stderr.isatty() and not args.quiet:  # a refusal stays the one line a script reads
            print(f"search: porting {reference} (checked against it on {args.seeds} seeds)", file=sys.stderr)
        report = port_into(run_dir, workspace, _stage(reference, workspace), args.seeds)
    except BaseUsageError:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    print(f"search: {report.get('summary')}", file=sys.stderr)
    report["created"] = created
    return report, str((workspace / report["workspace_port"]).absolute())


def _source_parity(store: Any, run_dir: Path, workspace: Path, best: Any, seeds: int) -> None:
    """The best node's kernel against the PyTorch source, recorded in the graph's meta (summary, report)."""
    from maxkernel.clients.source_port import PORT_FILE, parity_here, port_brief

    port = json.loads((run_dir / PORT_FILE).read_text(encoding="utf-8"))
    kernel = None
    if best is not None:
        kernel = run_dir / "best_kernel.py"
        kernel.write_text(store.source(best.source_hash), encoding="utf-8")
    print("search: judging the best kernel against the PyTorch source", file=sys.stderr)
    store.set_meta("port", port_brief(port))  # a resumed search of an older run records it here
    store.set_meta("source_parity", parity_here(run_dir, workspace, port, kernel, seeds))


class ServerDown(Exception):
    """No evaluator could be reached at start (exit 1, as `auto` does)."""


def _connect_message(e: Exception) -> str:
    from maxkernel.clients.mcp_client import _root_cause

    msg = str(e)
    if e.__cause__ is not None and "ExceptionGroup" in msg:
        msg = msg.split(": ExceptionGroup")[0] + ": " + _root_cause(e.__cause__)
    return msg


class SearchProgress:
    """The search's evaluator, wrapped to drive one live line: evaluations done/total, best, ETA."""

    def __init__(self, inner: Any, total: int, *, disable: bool = False, engine: Any = None) -> None:
        from maxkernel.tpu_tools.cli.live import LiveLine

        self._inner, self._best, self._engine = inner, None, engine
        self._line = LiveLine("search", total=total, disable=disable)
        self._done = self._hits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> SearchProgress:
        self._line.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._line.stop()

    async def evaluate(self, source: str, task: Any, **kw: Any):
        verdict, cached = await self._inner.evaluate(source, task, **kw)
        if cached:
            self._hits += 1
        else:
            self._done += 1
        if verdict.status == "valid" and verdict.time_us is not None:
            if self._best is None or verdict.time_us < self._best[0]:
                self._best = (verdict.time_us, verdict.time_label or "")
        best = f"{self._best[0]:.4g} us ({self._best[1]})" if self._best else "none yet"
        fleet = ""
        if self._engine is not None and hasattr(self._engine, "fleet"):
            fleet = f" | {self._engine.fleet().line()}"
        self._line.update(done=self._done, best=best, detail=f"{self._hits} cache hits{fleet}")
        return verdict, cached


def _open_ray(args: argparse.Namespace) -> Any:
    from maxkernel.clients.fleet.ray_engine import NoRayCluster, RayUnavailable, open_ray

    try:
        return open_ray(args, args.concurrency, profile_target=args.target)
    except NoRayCluster as e:  # no --ray-address and nothing running here: exit 2 with the recipe
        raise BaseUsageError(str(e)) from None
    except RayUnavailable as e:
        raise ServerDown(str(e)) from None


def _local_stdio(args: argparse.Namespace, workspace: Path) -> Any:
    from maxkernel.clients.mcp_client import stdio_params

    return stdio_params(str(workspace), max_workers=max(1, args.concurrency))


def search_main(args: argparse.Namespace) -> int:
    import anyio

    from maxkernel.clients.search.proposer import NoRootKernel

    prog = "maxkernel-orchestrate search"
    try:
        out = anyio.run(run_search, args)
        with cli_args.quiet_broken_pipe():
            _print_search(out, args.json)
    except BaseUsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return USAGE_EXIT
    except ServerDown as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return NO_KERNEL_EXIT
    except NoRootKernel as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return NO_KERNEL_EXIT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; continue with --resume RUN_DIR", file=sys.stderr)
        return 130
    return 0 if out.get("best") else NO_KERNEL_EXIT


def _print_search(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({k: v for k, v in out.items() if k != "curve"}, indent=2))
        return
    best = out.get("best")
    print(
        f"run: {out['run_dir']}  nodes {out['nodes']}  evaluations {out['evaluations']}  "
        f"cache hits {out['cache_hits']}  stopped: {out['stopped']}"
    )
    if best:
        sp = f"  {best['speedup_vs_root']:.2f}x vs root" if best.get("speedup_vs_root") else ""
        print(
            f"best: {best['id']}  {best['time_us']:.4g} us ({best['time_label']}){sp}  "
            f"re-verified: {'yes' if out.get('reverified') else 'no'}"
        )
        if best.get("numerics"):
            print(f"numerics: {best['numerics']}")
    if out.get("port"):
        port, parity = out["port"], out.get("source_parity") or {}
        print(f"port: {port['path']} ({port['check']}) from {port['source']}")
        print(f"source parity: {parity.get('summary', 'not judged')}")
    print(f"report: maxkernel-orchestrate report {out['run_dir']}")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (until clients/cli.py registers these verbs): `python -m maxkernel.clients.search.cli`."""
    p = argparse.ArgumentParser(prog="maxkernel-orchestrate")
    register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
