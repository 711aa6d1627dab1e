"""Run the Auto loop or a graph search over many JaxBench tasks, then score every task the same way.

Tasks run `concurrency` at a time over one engine (`clients/fleet/`): the `--server` list's
`Dispatcher` (least-busy server first, a dead server's work re-queued on the others), or a Ray cluster
(Ray places and retries each call). An Auto loop holds one slot and talks through the engine's
connection; if its server dies the task resumes from its journal on another one. Each row names the
hosts that evaluated it. Every finished task is
one row in `SUITE_DIR/suite.sqlite`; its run directory is `SUITE_DIR/tasks/<id>/`.

Scoring (the same for both modes, through the same pool): the loop's best kernel is evaluated again
on fresh seeds (an offset no loop uses) in a fresh pool process, then validated on each of the
tester's cases. The XLA baseline is the task's own workload as that evaluation's judge ran it (timed
natively, and estimated for the target by the candidate's estimator); the expert Pallas reference is
profiled on the same server. Kernel, baseline and expert times thus come from one tier.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.clients.fleet.engine import Engine, hosts_in
from maxkernel.clients.search.evaluator import EvalTask, EvaluatorDown, NoEvaluators
from maxkernel.clients.search.remote import verdict_from_report
from maxkernel.clients.suite.store import SuiteStore
from maxkernel.tpu_tools.profile.scoreboard import (
    FailedCase,
    SuiteScore,
    TaskRow,
    reference_tier_time,
    row_vs_xla,
    score,
    tier_time,
    timed_row,
)

SCORED_KERNEL, SCORED_VERDICT = "scored_kernel.py", "scored_verdict.json"
VERIFY_SEED_OFFSET = 70_000  # apart from validation (0..), Auto's fresh seeds (10_000) and re-verify (50_000)


class SuiteSettings(BaseModel):
    """Everything a resumed suite must reuse unchanged (stored in the suite DB's meta)."""

    tasks: list[str]
    references: dict[str, str] = Field(
        default_factory=dict,
        description="task -> the reference its server resolves (a workspace path), for tasks that are not "
        "JaxBench ids (a model's extracted regions); others are their own reference",
    )
    check_sizes: list[str] | None = Field(
        default=None, description="where validation runs kernels; None: the server's default check sizes"
    )
    mode: Literal["auto", "search"] = "auto"
    model: str = "offline"
    target: str = "tpu-v6e"
    size: Literal["small", "full"] = Field(
        default="full",
        description="the target size (full: the production size); checks run at small + derived",
    )
    concurrency: int = Field(default=2, ge=1)
    iterations: int = Field(default=1, ge=1, description="auto: iterations per task")
    test_cases: int = Field(default=2, ge=0, le=16, description="auto: tester cases per attempt")
    seeds: int = Field(default=3, ge=1, le=16)
    verify_seeds: int = Field(default=4, ge=1, le=16, description="fresh seeds of the suite's own re-verify")
    algorithm: Literal["parallel", "beam", "evolve"] = "beam"
    task_max_evaluations: int = Field(default=12, ge=1, description="search: evaluations per task")
    task_max_usd: float | None = None
    task_max_minutes: float | None = None
    max_usd: float | None = Field(default=None, description="whole suite: no task starts past it")
    max_minutes: float | None = None
    max_evaluations: int | None = None


class SuiteResult(BaseModel):
    suite_dir: str
    settings: SuiteSettings
    rows: list[TaskRow]
    score: SuiteScore
    stopped: str
    requeued_on_start: int
    dead_servers: list[str] = []
    wall_time_s: float


class SuiteProgress:
    """The live line (rich, on stderr): tasks done/total, correct so far, ETA; one printed line per task."""

    def __init__(self, total: int, done: int, correct: int, *, enabled: bool = True) -> None:
        self.total, self.done, self.correct = total, done, correct
        self.started, self.done_here = time.monotonic(), 0
        self.engine: Any = None  # set by the CLI: its fleet goes on the live line
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self._progress = Progress(
                TextColumn("suite"),
                BarColumn(),
                TextColumn(
                    "{task.completed}/{task.total} done | correct {task.fields[correct]} | ETA {task.fields[eta]}"
                    "{task.fields[fleet]}"
                ),
                console=Console(stderr=True, highlight=False),
                transient=False,
            )
            self._bar = self._progress.add_task(
                "suite", total=total, completed=done, correct=correct, eta="?", fleet=""
            )

    def __enter__(self) -> SuiteProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def eta_s(self) -> float | None:
        """Mean wall time per task finished in this process times the tasks left (tasks overlap)."""
        if not self.done_here:
            return None
        return (time.monotonic() - self.started) / self.done_here * (self.total - self.done)

    def fleet_text(self) -> str:
        if self.engine is None or not hasattr(self.engine, "fleet"):
            return ""
        try:
            return f" | {self.engine.fleet().line()}"
        except Exception:  # the view is a courtesy: never the end of a suite
            return ""

    def line(self) -> str:
        eta = self.eta_s()
        eta_text = "?" if eta is None else f"{int(eta // 60)}m{int(eta % 60):02d}s"
        return f"{self.done}/{self.total} done | correct {self.correct} | ETA {eta_text}{self.fleet_text()}"

    def finished(self, row: TaskRow, concurrency: int) -> None:
        self.done += 1
        self.done_here += 1
        self.correct += int(row.correct)
        if self._progress is not None:
            vs = row_vs_xla(row)
            sp = f": {vs.line()}" if vs else ""
            on = f" on {', '.join(row.hosts)}" if row.hosts else ""
            self._progress.console.print(
                f"{row.task}: {'correct' if row.correct else row.status}{sp}{on}  [{self.line()}]",
                markup=False,
            )
            eta = self.line().rsplit("ETA ", 1)[-1].split(" | ")[0]
            self._progress.update(
                self._bar, completed=self.done, correct=self.correct, eta=eta, fleet=self.fleet_text()
            )

    async def watch_fleet(self, every_s: float = 2.0) -> None:
        """Refresh the fleet part of the live line while tasks run (hosts come and go between tasks)."""
        while self._progress is not None and self.engine is not None:
            self._progress.update(self._bar, fleet=self.fleet_text())
            await asyncio.sleep(every_s)

    def note(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False)


def task_source(task: str) -> str:
    from maxkernel.jaxbench import registry

    if Path(task).is_file():  # a reference file (a model's extracted region)
        return Path(task).read_text(encoding="utf-8")
    return registry.task_path(task).read_text(encoding="utf-8")


def expert_source(task: str) -> str | None:
    from maxkernel.jaxbench import registry

    if Path(task).is_file():  # a reference file has no expert Pallas kernel beside it
        return None
    path = registry.pallas_reference_path(task)
    return path.read_text(encoding="utf-8") if path else None


class SuiteRunner:
    def __init__(
        self,
        store: SuiteStore,
        settings: SuiteSettings,
        dispatcher: Engine,
        *,
        model_factory: Callable[[str], Any],
        progress: SuiteProgress | None = None,
    ) -> None:
        self.store, self.s, self.dispatcher = store, settings, dispatcher
        self.model_factory = model_factory
        self.progress = progress
        self.stop_reason: str | None = None
        self._hosts: dict[str, set[str]] = {}

    def ref(self, task: str) -> str:
        """What the servers get for `task`: its reference path, else the task id itself."""
        return self.s.references.get(task, task)

    def _spec(self, task: str) -> str:
        """A reference file's text as the task's prompt (as `auto --reference FILE` gives it); a JaxBench
        task's text comes from the server (empty here)."""
        if task not in self.s.references:
            return ""
        return f"Reference module (the kernel must match it):\n```python\n{task_source(self.ref(task))}\n```"

    def _checks(self) -> dict[str, Any]:
        return {"check_sizes": list(self.s.check_sizes)} if self.s.check_sizes else {}

    # ---- budgets over the whole suite
    def _over_budget(self) -> str | None:
        s, st = self.s, self.store
        if s.max_usd is not None and st.spend_usd() >= s.max_usd:
            return f"suite budget: ${st.spend_usd():.4f} >= --max-usd {s.max_usd}"
        if s.max_evaluations is not None and st.evaluations() >= s.max_evaluations:
            return f"suite budget: {st.evaluations()} evaluations >= --max-evaluations {s.max_evaluations}"
        active_s = self._active_s()
        if s.max_minutes is not None and active_s / 60.0 >= s.max_minutes:
            return f"suite budget: {active_s / 60.0:.1f} min >= --max-minutes {s.max_minutes}"
        return None

    def _active_s(self) -> float:
        """Seconds this suite has run, over every process that ran it (kept in meta after each task)."""
        return self._base_active_s + time.monotonic() - self._started

    async def run(self) -> str:
        self._started = time.monotonic()
        self._base_active_s = float(self.store.get_meta("active_s") or 0.0)
        queue = asyncio.Queue()
        for t in self.store.pending():
            queue.put_nowait(t)

        async def worker() -> None:
            while not queue.empty() and self.stop_reason is None:
                task = queue.get_nowait()
                reason = self._over_budget()
                if reason:
                    self.stop_reason = reason
                    return
                self.store.start(task)
                try:
                    row, verdicts = await self.run_task(task)
                except NoEvaluators as e:
                    self.store.release(task, str(e))
                    self.stop_reason = f"no servers left: {e}"
                    return
                except Exception as e:  # one task's bug is one failed row, never the end of the suite
                    row = TaskRow(task=task, status="failed", note=f"{type(e).__name__}: {e}"[:2000])
                    verdicts = {}
                self.store.finish(row, verdicts)
                self.store.set_meta("active_s", self._active_s())  # a kill -9 keeps the minutes spent
                if self.progress is not None:
                    self.progress.finished(row, self.s.concurrency)

        try:
            await asyncio.gather(*(worker() for _ in range(self.s.concurrency)))
        finally:
            self.store.set_meta("active_s", self._active_s())
        return self.stop_reason or "finished"

    # ---- one task
    async def run_task(self, task: str) -> tuple[TaskRow, dict[str, Any]]:
        started = time.monotonic()
        task_dir = self.store.task_dir(task)
        task_dir.mkdir(parents=True, exist_ok=True)
        if self.s.mode == "auto":
            loop = await self._auto(task, task_dir)
        else:
            loop = await self._search(task, task_dir)
        row = TaskRow(
            task=task,
            status="done",
            target=self.s.target,
            size=self.s.size,
            spend_usd=loop["spend_usd"],
            evaluations=loop["evaluations"],
            kernel_label=f"best of {self.s.mode}",
        )
        verdicts: dict[str, Any] = {"loop": loop["summary"]}
        await self._shapes(task, row)
        if loop["source"] is None:
            row.note = f"no verified kernel: {loop['why']}"
        else:
            await self._score(task, loop["source"], loop["cases"], row, verdicts)
        await self._source_parity(task, loop["source"], row, verdicts)
        row.wall_time_s = round(time.monotonic() - started, 3)
        row.hosts = sorted(self._hosts.pop(task, set()))
        return row, verdicts

    async def _source_parity(
        self, task: str, source: str | None, row: TaskRow, verdicts: dict[str, Any]
    ) -> None:
        """A task ported from a PyTorch source (suite --reference DIR): its port on the row, and the scored
        kernel judged against the source itself (validate in interpret mode on CPU, fresh seeds)."""
        import json

        from maxkernel.clients.source_port import parity_verdict

        port_file = self.store.root / "ports" / f"{task}.json"
        if not port_file.is_file():
            return
        port = json.loads(port_file.read_text(encoding="utf-8"))
        row.port = f"{port.get('port_path')} ({(port.get('check') or {}).get('status')})"
        if source is None:
            return
        args = {
            "kernel_source": source,
            "reference": port["workspace_source_reference"],
            "target": "cpu",
            "seeds": self.s.verify_seeds,
        }
        report = await self.dispatcher.run(lambda ev: ev.call("validate_kernel", args))
        row.source_parity, row.source_parity_note = parity_verdict(report, self.s.verify_seeds)
        verdicts["source_parity"] = {"ok": row.source_parity, "summary": row.source_parity_note}

    def _budget(self):
        from maxkernel.clients.models import Budget

        return Budget(max_usd=self.s.task_max_usd, max_minutes=self.s.task_max_minutes)

    async def _auto(self, task: str, task_dir: Path) -> dict[str, Any]:
        from maxkernel.clients.auto.loop import AutoLoop
        from maxkernel.clients.auto.state import AutoConfig
        from maxkernel.clients.mcp_client import KernelServerClient
        from maxkernel.clients.run_store import STATE_FILE, RunStore

        model = self.model_factory(self.s.model)
        store = RunStore(task_dir)

        async def on(ev: Any) -> dict:
            client = KernelServerClient.sharing(ev.connection, ev.name)
            if (task_dir / STATE_FILE).is_file():  # a killed suite, or a server that died mid-task
                loop = AutoLoop.resume(model, [client], store)
            else:
                config = AutoConfig(
                    task=task,
                    reference=self.ref(task),
                    task_spec=self._spec(task),
                    check_sizes=self.s.check_sizes,
                    target=self.s.target,
                    size=self.s.size,
                    iterations=self.s.iterations,
                    seeds=self.s.seeds,
                    model=self.s.model,
                    budget=self._budget(),
                    test_cases=self.s.test_cases,
                )
                loop = AutoLoop.start(model, [client], store, config)
            summary = await loop.run()
            self._hosts.setdefault(task, set()).update(
                getattr(ev, "hosts", None) or ()
            )  # Ray: each call's host
            if str(summary.get("stop_reason", "")).startswith("server unavailable"):
                raise EvaluatorDown(summary["stop_reason"])  # the dispatcher resumes it elsewhere
            return summary

        summary = await self.dispatcher.run(on)
        best = summary.get("best")
        cases_file = task_dir / "test_cases.json"
        cases = []
        if cases_file.is_file():
            import json

            from maxkernel.clients.auto.roles import _input_case
            from maxkernel.subagents import TestCase

            raw = json.loads(cases_file.read_text(encoding="utf-8")).get("cases") or []
            cases = [_input_case(TestCase.model_validate(c)) for c in raw][: self.s.test_cases]
        return {
            "source": Path(best["path"]).read_text(encoding="utf-8") if best else None,
            "why": summary.get("stop_reason"),
            "cases": cases,
            "spend_usd": float(summary["spend"]["usd"]),
            "evaluations": sum(len(it["attempts"]) for it in summary.get("iterations", [])),
            "summary": {k: summary.get(k) for k in ("best", "stop_reason", "iterations_finished", "spend")},
        }

    async def _search(self, task: str, task_dir: Path) -> dict[str, Any]:
        import argparse

        from maxkernel.clients.models import Ledger
        from maxkernel.clients.search.algorithms import Search, SearchSettings
        from maxkernel.clients.search.cli import make_proposer, prepare_proposer, reference_hash
        from maxkernel.clients.search.evaluator import CachedEvaluator
        from maxkernel.clients.search.store import EvalCache, GraphStore
        from maxkernel.clients.search.templates import space_for
        from maxkernel.clients.search.tuned import record_best

        gs = GraphStore(task_dir)
        cache = EvalCache(self.store.root / "eval-cache.sqlite")
        try:
            ref = self.ref(task)
            etask = EvalTask(
                reference=ref,
                check_sizes=tuple(self.s.check_sizes) if self.s.check_sizes else None,
                target=self.s.target,
                size=self.s.size,
                seeds=self.s.seeds,
                profile_target=self.s.target,
            )
            settings = SearchSettings(algorithm=self.s.algorithm, max_evaluations=self.s.task_max_evaluations)
            ledger, budget = Ledger(), self._budget()
            ns = argparse.Namespace(
                proposer=None, model=self.s.model, target=self.s.target, size=self.s.size, root=None
            )
            proposer = make_proposer(ns, ref, ledger, budget)
            # a model proposer starts from the Auto loop's task text, asked of the pool's servers
            await self.dispatcher.run(lambda ev: prepare_proposer(proposer, ev, ref, self.s.size))
            cached = CachedEvaluator(self.dispatcher, cache, reference_hash(ref))
            search = Search(
                gs,
                cached,
                proposer,
                etask,
                settings,
                ledger=ledger,
                budget=budget,
                dispatcher=self.dispatcher,
            )
            result = await search.run()
            for n in gs.nodes():  # the hosts its verdicts name (a --server URL is not a host)
                if n.verdict is not None:
                    self._hosts.setdefault(task, set()).update(hosts_in(n.verdict.model_dump(mode="json")))
            best = result.best
            if best is not None and not result.reverified:
                best = None
            if best is not None and best.config and (space := space_for(ref)) is not None:
                record_best(
                    space,
                    self.s.target,
                    task,
                    self.s.size,
                    best.config,
                    best.time_us,
                    best.time_label,
                    "suite",
                )
            source = gs.source(best.source_hash) if best else None
            cases = await self._tester_cases(task, task_dir, source, ledger) if source else []
            return {
                "source": source,
                "why": result.stopped if best is None else None,
                "cases": cases,
                "spend_usd": ledger.total_cost_usd,
                "evaluations": result.evaluations,
                "summary": {
                    "best": best.id if best else None,
                    "stopped": result.stopped,
                    "evaluations": result.evaluations,
                    "reverified": bool(result.reverified),
                },
            }
        finally:
            gs.close()
            cache.close()

    async def _tester_cases(self, task: str, task_dir: Path, source: str, ledger: Any) -> list[dict]:
        """Search mode: the tester role's cases for the winner, asked once (cached in test_cases.json)."""
        import json

        from maxkernel.clients.auto.roles import _input_case
        from maxkernel.clients.auto.state import DESIGN_CHIP
        from maxkernel.subagents import OutputParseError, TestCase, get_role, parse_output, render_test_prompt

        path = task_dir / "test_cases.json"
        if not path.is_file():
            role = get_role("tester")
            chip = self.s.target if self.s.target.startswith("tpu-") else DESIGN_CHIP
            prompt = render_test_prompt(task_source(self.ref(task)), chip, kernel=source)
            from maxkernel.clients.models import Message

            raw: list[dict] = []
            note = ""
            try:
                started = time.perf_counter()
                response = await self.model_factory(self.s.model).request(
                    [Message.system(role.system_prompt), Message.user(prompt)]
                )
                ledger.record(role.name, response, latency_ms=(time.perf_counter() - started) * 1000)
                raw = [c.model_dump() for c in parse_output(role, response.text).cases]
            except OutputParseError as e:
                note = f"tester reply unreadable: {e}"
            except Exception as e:  # a model that fails costs the extra cases, not the task
                note = f"tester failed: {type(e).__name__}: {e}"
            path.write_text(json.dumps({"for": task, "cases": raw, "note": note}, indent=1))
        raw = json.loads(path.read_text(encoding="utf-8")).get("cases") or []
        return [_input_case(TestCase.model_validate(c)) for c in raw][: self.s.test_cases]

    # ---- scoring
    async def _call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        task = args.get("reference")
        if task:
            args = {**args, "reference": self.ref(task)}
        report = await self.dispatcher.run(lambda ev: ev.call(tool, args))
        if task:
            self._hosts.setdefault(task, set()).update(hosts_in(report))
        return report

    async def _shapes(self, task: str, row: TaskRow) -> None:
        """The reference's input and output shapes at the target size, as the server traces them."""
        program = await self._call("describe_reference", {"reference": task, "size": self.s.size})
        spec = lambda t: f"{t['dtype']}[{','.join(str(d) for d in t['shape'])}]"  # noqa: E731
        row.input_shapes = [spec(t) for t in program.get("inputs") or []]
        row.output_shapes = [spec(t) for t in program.get("out_specs") or []]  # none if it cannot trace

    def _write_evidence(self, task: str, source: str, verdicts: dict[str, Any], row: TaskRow) -> None:
        """The scored kernel and its verdicts beside the task's run, linked from the report (relative)."""
        import json

        task_dir = self.store.task_dir(task)
        task_dir.mkdir(parents=True, exist_ok=True)
        (task_dir / SCORED_KERNEL).write_text(source, encoding="utf-8")
        (task_dir / SCORED_VERDICT).write_text(json.dumps(verdicts, indent=1, default=str), encoding="utf-8")
        row.kernel_file = (task_dir / SCORED_KERNEL).relative_to(self.store.root).as_posix()
        row.verdict_file = (task_dir / SCORED_VERDICT).relative_to(self.store.root).as_posix()

    async def _expert_time(self, task: str, row: TaskRow) -> tuple[float | None, str | None] | None:
        """The expert Pallas reference profiled as a candidate; why it has no time goes in the row."""
        source = expert_source(self.ref(task))
        if source is None:
            return None
        report = await self._call(
            "profile_kernel",
            {"kernel_source": source, "reference": task, "target": self.s.target, "size": self.s.size},
        )
        if not report.get("ok"):  # a missing expert time must not look like a slow one
            f = report.get("failure") or {}
            why = f"{f.get('kind', '')}: {f.get('summary', report.get('tool_error', ''))}"[:300]
            row.note = f"{row.note + '; ' if row.note else ''}no expert time: {why}"
            return None, None
        return tier_time(report, self.s.target)

    async def _score(
        self, task: str, source: str, cases: list[dict], row: TaskRow, verdicts: dict[str, Any]
    ) -> None:
        report = await self._call(
            "evaluate_kernel",
            {
                "reference": task,
                "kernel_source": source,
                "compile_target": self.s.target,
                "validate_target": self.s.target,  # its numerics: off the chip it still runs interpreted
                "profile_target": self.s.target,
                "size": self.s.size,
                "seeds": self.s.verify_seeds,
                "seed_offset": VERIFY_SEED_OFFSET,
                **self._checks(),
            },
        )
        v = verdict_from_report(report, "pool", "", 0.0)
        verdicts["verify"] = {
            "status": v.status,
            "failure": v.failure,
            "time_us": v.time_us,
            "tier": v.time_label,
        }
        scored: dict[str, Any] = {"evaluation": report, "cases": []}
        row.kernel_sha256 = report.get("kernel_sha256")
        evidence = ["the loop's own validation"]
        ok = v.status == "valid"
        if ok:
            evidence.append(f"re-verified in a fresh pool process on {self.s.verify_seeds} fresh seeds")
            if (report.get("validation") or {}).get("error_summary"):
                evidence.append(report["validation"]["error_summary"])
        else:
            row.failed = failed_stage(report, self.s.target, self.s.size)
        validation = report.get("validation") or {}
        checked = [c.get("name") for c in validation.get("check_sizes") or [] if c.get("name")]
        row.check_sizes = checked or ([validation["size"]] if validation.get("size") else [])
        for case in cases:
            args = {
                "kernel_source": source,
                "reference": task,
                "target": self.s.target,  # the target's numerics, as the evaluation's validation
                "size": self.s.size,
                "case": case,
                "seeds": 1,
                "seed_offset": VERIFY_SEED_OFFSET,
            }
            r = await self._call("validate_kernel", args)
            failure = r.get("failure") or {}
            kind = failure.get("kind")
            if kind == "weak_check":  # one seed cannot tell a constant (a scalar loss): as many as can
                from maxkernel.tpu_tools.judge.validate import seeds_needed  # numpy: only when needed

                r = await self._call("validate_kernel", args | {"seeds": seeds_needed()})
                failure = r.get("failure") or {}
                kind = failure.get("kind")
            verdicts.setdefault("cases", []).append(
                {"case": case.get("name"), "ok": r.get("ok"), "kind": kind}
            )
            scored["cases"].append({"case": case, "verdict": r})
            # a case runs over the first check size (the target size is only compiled off the chip)
            ran_at = [c.get("name") for c in r.get("check_sizes") or [] if c.get("name")]
            first = (ran_at or self.s.check_sizes or row.check_sizes or ["small"])[0]
            row.check_sizes.append(case_size(case, first))
            if r.get("ok"):
                evidence.append(f"tester case {case.get('name')}")
            elif kind == "weak_check" and ok:
                # the case's own draw cannot tell a trivial output on as many seeds as could: it is no evidence
                # either way (25k's per-sample mean on i.i.d. inputs), and the validation above, which could
                # tell, stands. Said in the evidence, never counted as a check that passed.
                evidence.append(
                    f"tester case {case.get('name')} told nothing: {failure.get('summary') or 'weak check'}"
                )
            elif kind != "case_unusable":  # a case the reference cannot run blames nobody
                if ok:
                    row.failed = FailedCase(
                        case=f"tester case {case.get('name')}",
                        size=case_size(case, first),
                        kind=kind or "",
                        summary=failure.get("summary") or r.get("tool_error") or "",
                    )
                ok = False
        row.check_sizes = list(dict.fromkeys(row.check_sizes))
        row.correct = ok
        row.correct_evidence = evidence if ok else []
        self._write_evidence(task, source, scored, row)
        if not ok:
            f = row.failed
            row.note = (
                f"not correct: {f.case} at size {f.size or '?'}: {f.kind}: {f.summary}"
                if f
                else f"not correct: {v.failure}"
            )[:1000]
            return
        # The baseline is the task's own workload as the judge ran it in this very report (never handed
        # to a candidate process, which may not import JaxBench): measured on the chip, else estimated.
        baseline = reference_tier_time(report.get("profile"), self.s.target)
        if baseline[0] is None:
            row.note = "no XLA baseline time: the report has no reference time or estimate for the target"
        expert = await self._expert_time(task, row)
        kernel = tier_time(report.get("profile"), self.s.target)
        timed_row(row, kernel, baseline, expert)
        verdicts["times"] = {
            "kernel": [v.time_us, v.time_label],
            "baseline": list(baseline),
            "expert": expert,
        }


def case_size(case: dict[str, Any], size: str) -> str:
    """A tester case's size as a reader re-runs it: its base size, grown, with its overrides."""
    text = str(case.get("base") or size)
    if case.get("grow"):
        text += f" x{case['grow']}"
    if case.get("sizes"):
        text += " (" + ", ".join(f"{k}={v}" for k, v in case["sizes"].items()) + ")"
    return text


def failed_stage(report: dict[str, Any], target: str, size: str) -> FailedCase:
    """The first negative verdict of an evaluation report: its stage (for validation, its first failing
    seed), the size it ran at, and the verdict's own kind and summary."""
    stage = report.get("stopped_at") or ""
    part = report.get({"validate": "validation"}.get(stage, stage)) or {}
    failure = part.get("failure") or {}
    case = {"compile": f"compile for {part.get('target') or target}", "profile": "profile"}.get(stage, stage)
    if stage == "validate":
        bad = [s for s in part.get("per_seed") or [] if not s.get("ok")]
        case = f"seed {bad[0]['seed']}" if bad else "validation"
        if part.get("case"):
            case += f" of case {part['case'].get('name')}"
    if not stage:
        case = "evaluation"
    summary = failure.get("summary") or report.get("tool_error") or ""
    # where it failed: the first check that did not pass (validation compiles at the target size, then
    # runs at the check sizes), else the size the stage names
    failed_at = next((c.get("size") for c in part.get("checks") or [] if not c.get("ok")), None)
    failed_at = failed_at or (failure.get("sizes_failed") or [None])[0] or part.get("size") or size
    return FailedCase(case=case, size=failed_at, kind=failure.get("kind") or "", summary=summary)


def score_rows(store: SuiteStore) -> tuple[list[TaskRow], SuiteScore]:
    rows = store.rows()
    return rows, score(rows)
