"""`maxkernel-orchestrate search` and `maxkernel-orchestrate report`: the graph search from the shell.

`register(subparsers)` adds both verbs to the orchestrator's parser; each sets `func`, which returns
the exit code (0 found a kernel / wrote the report, 1 no valid kernel, 2 bad input).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

USAGE_EXIT, NO_KERNEL_EXIT = 2, 1


class UsageError(ValueError):
    pass


def register(sub: Any) -> None:
    s = sub.add_parser("search", help="graph search over candidate kernels (parallel, beam, evolve)")
    s.add_argument("reference", nargs="?", help="JaxBench task id (8p_GEMM) or reference path")
    s.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a search: finished nodes are kept, none repeated"
    )
    s.add_argument("--run-dir", help="where the graph lives (default runs/search-<task>-<time>)")
    s.add_argument("--algorithm", choices=["parallel", "beam", "evolve"], default="beam")
    s.add_argument("--strategy", action="append", default=[], help="catalogue name or free text (repeatable)")
    s.add_argument("--server", action="append", default=[], help="MCP server URL or 'stdio:CMD' (repeatable)")
    s.add_argument("--workspace", default="./maxkernel-work", help="workspace of the local stdio server")
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
        help="template: walk the task's config space; model: ask --model (default: template if known)",
    )
    s.add_argument("--model", default="offline", help="model spec for --proposer model (default offline)")
    s.add_argument("--root", help="a kernel file to start from (model proposer)")
    s.add_argument("--target", default="tpu-v6e")
    s.add_argument("--size", default="small", choices=["small", "full"])
    s.add_argument("--concurrency", type=int, default=2)
    s.add_argument("--max-evaluations", type=int, default=40)
    s.add_argument("--beam-size", type=int, default=2)
    s.add_argument("--branches", type=int, default=3)
    s.add_argument("--depth", type=int, default=6)
    s.add_argument("--runs", type=int, default=4)
    s.add_argument("--steps", type=int, default=6)
    s.add_argument("--islands", type=int, default=2)
    s.add_argument("--population", type=int, default=6)
    s.add_argument("--generations", type=int, default=12)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-usd", type=float)
    s.add_argument("--max-minutes", type=float)
    s.add_argument(
        "--cache", help="evaluation cache file, shareable across runs (default runs/eval-cache.sqlite)"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=search_main)

    r = sub.add_parser("report", help="write a self-contained HTML report of a search run")
    r.add_argument("run_dir")
    r.add_argument("--out", help="HTML path (default RUN_DIR/report.html)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON instead")
    r.set_defaults(func=report_main)


def report_main(args: argparse.Namespace) -> int:
    from maxkernel.clients.search.report import summary, write_report
    from maxkernel.clients.search.store import GRAPH_FILE, GraphStore

    if not (Path(args.run_dir) / GRAPH_FILE).is_file():
        print(
            f"maxkernel-orchestrate report: no {GRAPH_FILE} in {args.run_dir}: give a search run directory",
            file=sys.stderr,
        )
        return USAGE_EXIT
    if args.json:
        store = GraphStore(args.run_dir, requeue=False)
        print(json.dumps(summary(store), indent=2))
        store.close()
        return 0
    print(write_report(args.run_dir, args.out))
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


def make_proposer(args: argparse.Namespace, reference: str, ledger, budget):
    from maxkernel.clients.search.proposer import ModelProposer, TemplateProposer
    from maxkernel.clients.search.templates import space_for

    space = space_for(reference)
    kind = args.proposer or ("template" if space else "model")
    if kind == "template":
        if space is None:
            raise UsageError(f"no template space for {reference!r}: use --proposer model")
        from maxkernel.clients.tuned import cached_initial

        initial, line = cached_initial(space, args.target, reference, getattr(args, "size", "small"))
        print(f"search: {line}", file=sys.stderr)
        return TemplateProposer(space, initial)
    from maxkernel.clients.cli import build_model
    from maxkernel.jaxbench import registry

    task_path = registry.task_path(registry.resolve_id(reference))
    root = Path(args.root).read_text(encoding="utf-8") if args.root else None
    return ModelProposer(
        build_model(args.model),
        task_spec=task_path.read_text(encoding="utf-8"),
        chip=args.target,
        ledger=ledger,
        budget=budget,
        root_source=root,
    )


async def run_search(args: argparse.Namespace, servers: list[Any] | None = None) -> dict[str, Any]:
    """Run (or resume) one search; `servers` overrides --server (tests pass in-process server objects)."""
    from contextlib import AsyncExitStack

    from maxkernel.clients.models import Budget, Ledger
    from maxkernel.clients.search.algorithms import Search, SearchSettings
    from maxkernel.clients.search.evaluator import CachedEvaluator, Dispatcher, EvalTask
    from maxkernel.clients.search.remote import MCPEvaluator
    from maxkernel.clients.search.report import summary
    from maxkernel.clients.search.store import EvalCache, GraphStore

    if args.resume:
        run_dir = Path(args.resume)
        store = GraphStore(run_dir)
        task = EvalTask.model_validate(store.get_meta("task") or {})
        settings = SearchSettings.model_validate(store.get_meta("settings") or {})
        if not store.get_meta("task"):
            raise UsageError(f"{run_dir} holds no search to resume")
        reference = task.reference
    else:
        if not args.reference:
            raise UsageError("give a reference (task id or path), or --resume RUN_DIR")
        reference = args.reference
        task = EvalTask(reference=reference, target=args.target, size=args.size, profile_target=args.target)
        settings = _settings(args)
        slug = reference.replace("/", "_")[:40]
        run_dir = Path(args.run_dir or f"runs/search-{slug}-{time.strftime('%Y%m%d-%H%M%S')}")
        store = GraphStore(run_dir)
    ledger, budget = Ledger(), Budget(max_usd=args.max_usd, max_minutes=args.max_minutes)
    cache = EvalCache(args.cache or (run_dir.parent / "eval-cache.sqlite"))
    async with AsyncExitStack() as stack:
        if args.objective == "estimate":
            from maxkernel.clients.search.objective import EstimateEvaluator

            evaluators: list[Any] = [EstimateEvaluator(reference, task.target, task.size)]
        else:
            specs = servers if servers is not None else (args.server or [_local_stdio(args)])
            evaluators = [await stack.enter_async_context(MCPEvaluator(s)) for s in specs]
        dispatcher = Dispatcher(evaluators, args.concurrency)
        cached = CachedEvaluator(dispatcher, cache, reference_hash(reference))
        proposer = make_proposer(args, reference, ledger, budget)
        search = Search(
            store, cached, proposer, task, settings, ledger=ledger, budget=budget, dispatcher=dispatcher
        )
        result = await search.run()
    out = summary(store)
    if result.best is not None and result.reverified and result.best.config:  # the tuned-config cache
        from maxkernel.clients.search.templates import space_for
        from maxkernel.clients.tuned import record_best

        if (space := space_for(reference)) is not None:
            b = result.best
            record_best(space, task.target, reference, task.size, b.config, b.time_us, b.time_label, "search")
    out["dead_servers"] = dispatcher.dead
    out["requeued_on_start"] = result.requeued_on_start
    store.close()
    cache.close()
    return out


def _local_stdio(args: argparse.Namespace) -> Any:
    from maxkernel.clients.mcp_client import stdio_params

    return stdio_params(args.workspace, max_workers=max(1, args.concurrency))


def search_main(args: argparse.Namespace) -> int:
    import anyio

    try:
        out = anyio.run(run_search, args)
    except UsageError as e:
        print(f"maxkernel-orchestrate search: {e}", file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("maxkernel-orchestrate search: interrupted; continue with --resume RUN_DIR", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "curve"}, indent=2))
    else:
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
        print(f"report: maxkernel-orchestrate report {out['run_dir']}")
    return 0 if out.get("best") else NO_KERNEL_EXIT


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (until clients/cli.py registers these verbs): `python -m maxkernel.clients.search.cli`."""
    p = argparse.ArgumentParser(prog="maxkernel-orchestrate")
    register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
