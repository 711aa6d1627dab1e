"""The Auto loop: plan -> implement -> compile -> (debug) -> validate -> test -> profile -> analyse
(-> autotune), N times.

Models propose; the server judges. Every verdict comes from the MCP tools, and the best kernel is the
fastest one that compiled for the target and passed validation, ranked by measured time when the
target chip ran it, else by the server's labeled static estimate (the summary says which).

The run is a journal of steps: after each finished step the whole `RunState` is written atomically to
`state.json`, so `resume` continues from the next step with nothing repeated and nothing lost. Budget
exhaustion, a model that keeps failing, or a lost server end the run cleanly with what it has.

The tester's extra input cases and the autotuner's sweep live in clients/auto/roles.py; an autotuned
config comes back through compile -> validate -> test -> profile as one more attempt of its iteration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from maxkernel.clients.auto.cache import CachedServer, RunEvalCache
from maxkernel.clients.auto.roles import RoleSteps
from maxkernel.clients.auto.state import (
    DESIGN_CHIP,
    Attempt,
    AutoConfig,
    Best,
    IterationState,
    RunState,
    Score,
    Step,
    StepFailed,
    _error_text,
    _norm,
    score_profile,
)
from maxkernel.clients.mcp_client import KernelServerClient, ServerToolError, ServerUnavailable
from maxkernel.clients.models import (
    BudgetExceeded,
    Ledger,
    Message,
    Model,
    ModelConfigError,
    ModelError,
    TransientModelError,
)
from maxkernel.clients.progress import NullReporter, Reporter
from maxkernel.clients.run_store import RunStore
from maxkernel.clients.task_text import task_text
from maxkernel.subagents import (
    MAX_EXAMPLES,
    MIN_SCORE_RATIO,
    Diagnosis,
    OutputParseError,
    Role,
    get_role,
    parse_output,
    render_analyze_profile_prompt,
    render_debug_prompt,
    render_implement_prompt,
    render_plan_prompt,
    retrieval_budget,
)
from maxkernel.tpu_tools.judge.sizes import SIZE_DEPENDENT
from maxkernel.tpu_tools.profile.scoreboard import profile_vs_xla


class AutoLoop(RoleSteps):
    """One Auto run over one or more connected servers (the first compiles and validates)."""

    def __init__(
        self,
        model: Model,
        servers: list[KernelServerClient],
        store: RunStore,
        state: RunState,
        *,
        ledger: Ledger | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        if not servers:
            raise ValueError("AutoLoop needs at least one connected server")
        self.model, self.store, self.state = model, store, state
        self.ledger = ledger or Ledger()
        self.reporter = reporter or NullReporter()
        self._transcripts = 0
        for s in servers:
            s.on_progress = self.reporter.tool
        # a byte-identical kernel asked the same question again is a cache hit, not a re-evaluation
        self.eval_cache = RunEvalCache(store)
        self.servers = [
            CachedServer(
                s, self.eval_cache, lambda: f"iteration {self.state.current.index}", self.reporter.note
            )
            for s in servers
        ]

    @classmethod
    def start(
        cls, model: Model, servers: list[KernelServerClient], store: RunStore, config: AutoConfig, **kw: Any
    ):
        return cls(model, servers, store, RunState(config=config), **kw)

    @classmethod
    def resume(cls, model: Model, servers: list[KernelServerClient], store: RunStore, **kw: Any) -> AutoLoop:
        state = RunState.model_validate_json(store.load_state_json())
        ledger = (
            Ledger.from_json(store.path("ledger.json").read_text())
            if store.path("ledger.json").exists()
            else Ledger()
        )
        ledger.started_at_s = time.time() - state.elapsed_s  # budget minutes count active time only
        state.stop_reason = None
        return cls(model, servers, store, state, ledger=ledger, **kw)

    # ---- the run ---------------------------------------------------------------------------------

    @property
    def config(self) -> AutoConfig:
        return self.state.config

    async def run(self, *, max_steps: int | None = None) -> dict:
        """Run until done, out of budget, or `max_steps` steps finished in this call; return the summary."""
        st = self.state
        started, base_elapsed, done_here = time.time(), st.elapsed_s, 0
        try:
            await self._prepare()
            while st.next_step != "done":
                if max_steps is not None and done_here >= max_steps:
                    st.stop_reason = (
                        f"interrupted after {len(st.steps)} steps (resume with --resume {self.store.root})"
                    )
                    break
                step, iteration = st.next_step, st.current.index
                st.next_step = await getattr(self, f"_step_{step}")()
                st.steps.append(f"{iteration}:{step}")
                done_here += 1
                st.elapsed_s = base_elapsed + time.time() - started
                self._journal()
                self._report(step, iteration)
        except BudgetExceeded as e:
            st.stop_reason = f"budget exhausted: {e}"
        except (ModelError, ModelConfigError, TransientModelError) as e:
            st.stop_reason = f"model failed: {e}"
        except ServerUnavailable as e:
            st.stop_reason = f"server unavailable: {e}"
        if st.next_step == "done" and st.stop_reason is None:
            st.stop_reason = f"completed {self.config.iterations} iteration(s)"
        st.elapsed_s = base_elapsed + time.time() - started
        self._journal()
        return self.write_summary()

    async def _prepare(self) -> None:
        """Task text and chip facts, fetched once through MCP and kept in the journal."""
        st, server = self.state, self.servers[0]
        # what the reference is: its summary and source, then its traced program (as the search builds it)
        self.config.task_spec = await task_text(
            server, self.config.reference, self.config.size, self.config.task_spec, note=self.reporter.note
        )
        if not st.chip:
            chips = await server.list_chips()
            name = self.config.target if self.config.target.startswith("tpu") else DESIGN_CHIP
            st.chip = next((c for c in chips if c.get("name") == name), chips[0] if chips else {})
            if not self.config.target.startswith("tpu") and st.chip:  # checked at the host's numerics
                st.chip = {**st.chip, "numerics": "cpu"}
        self._journal()

    def _journal(self) -> None:
        self.store.write_json("ledger.json", self.ledger)
        self.store.save_state(self.state)

    def _report(self, step: str, iteration: int) -> None:
        st = self.state
        if st.finished and st.finished[-1].index == iteration:
            detail = f"iteration ended: {st.finished[-1].outcome}"
        else:
            cur = st.current
            detail = {
                "plan": f"plan: {(cur.plan or {}).get('strategy', '')[:60]}",
                "implement": f"kernel-{len(cur.attempts) - 1}.py written",
                "compile": "compiled" if (cur.compile or {}).get("ok") else "compile failed",
                "validate": _validate_detail(cur.validation),
                "test": self._tests_detail(),
                "autotune": (cur.autotune or {}).get("decision", "autotuned")[:80],
                "debug": "fix proposed"
                if cur.attempts and cur.attempts[-1].outcome == "pending"
                else "fix rejected",
                "profile": cur.score.label if cur.score else "profiled",
            }.get(step, "done")
        best = st.best
        self.reporter.step(
            iteration,
            self.config.iterations,
            step,
            detail,
            f"iter {best.iteration}, {best.score.label}" if best else "none yet",
            self._spend_text(),
        )

    def _spend_text(self) -> str:
        u = self.ledger.total_usage
        return f"${self.ledger.total_cost_usd:.4f}, {u.total_tokens:,} tokens, {self.ledger.calls} calls"

    # ---- model calls -----------------------------------------------------------------------------

    async def _ask(
        self, role_name: str, prompt: str, step: str, parse: Callable[[Role, str], Any] | None = None
    ) -> Any:
        """One role's reply, parsed (by `parse`, default the role's output model); a parse failure is
        answered once with the error, then StepFailed."""
        role = get_role(role_name)
        messages = [Message.system(role.system_prompt), Message.user(prompt)]
        replies: list[dict] = []
        error: OutputParseError | None = None
        try:
            for _ in range(2):
                self.config.budget.check(self.ledger)
                t0 = time.perf_counter()
                response = await self.model.request(messages)
                entry = self.ledger.record(role.name, response, latency_ms=(time.perf_counter() - t0) * 1000)
                replies.append(
                    {"text": response.text, "usage": entry.usage.model_dump(), "cost_usd": entry.cost_usd}
                )
                try:
                    return (parse or parse_output)(role, response.text)
                except OutputParseError as e:
                    error = e
                    messages += [
                        Message.assistant(response.text),
                        Message.user(
                            f"Your reply could not be read: {e}\nReply again, following the reply format exactly."
                        ),
                    ]
            raise StepFailed(f"{role.name} reply unreadable twice: {error}")
        finally:
            self._save_transcript(step, messages, replies)

    def _save_transcript(self, step: str, messages: list[Message], replies: list[dict]) -> None:
        self._transcripts += 1
        it = self.store.iteration_dir(self.state.current.index)
        cost = [r["cost_usd"] for r in replies]
        self.store.write_json(
            f"{it}/transcript-{len(self.state.steps) + 1:03d}-{step}.json",
            {
                "step": step,
                "messages": [m.model_dump() for m in messages],
                "replies": replies,
                "cost_usd": None if any(c is None for c in cost) else sum(cost),
            },
        )

    # ---- steps: each returns the next step ---------------------------------------------------------

    def _dir(self) -> str:
        return self.store.iteration_dir(self.state.current.index)

    async def _examples(self, role: str, error: str | None = None) -> list[dict]:
        """The best working examples for this task (by its reference) or this error, via find_examples.

        The task's own Pallas reference is left out by the server; a server without the tool gives none.
        """
        args: dict[str, Any] = {
            "k": MAX_EXAMPLES,
            "budget_tokens": retrieval_budget(role),
            "min_score_ratio": MIN_SCORE_RATIO,
        }
        if error:  # the debugger's prompt already carries the guide sections for this error: kernels only
            args |= {"error": error, "kinds": ["kernel"]}
        else:
            args |= {"reference": self.config.reference, "kinds": ["kernel"]}
        try:
            return (await self.servers[0].find_examples(**args)).get("hits", [])
        except ServerToolError as e:
            self.reporter.note(f"no examples for the {role}: {str(e)[:200]}")
            return []

    async def _step_plan(self) -> Step:
        best = self.state.best
        prompt = render_plan_prompt(
            self.config.task_spec,
            self.state.chip,
            kernel=best.source if best else None,
            feedback=self.state.feedback,
            examples=await self._examples("planner"),
        )
        try:
            plan = await self._ask("planner", prompt, "plan")
        except StepFailed as e:
            return self._end_iteration(f"failed: {e}")
        self.state.current.plan = plan.model_dump()
        self.store.write_json(f"{self._dir()}/plan.json", plan)
        return "implement"

    async def _step_implement(self) -> Step:
        cur, best = self.state.current, self.state.best
        prompt = render_implement_prompt(
            cur.plan or {},
            self.config.task_spec,
            self.state.chip,
            previous_source=best.source if best else None,
            feedback=self.state.feedback,
            examples=await self._examples("implementer"),
        )
        try:
            proposal = await self._ask("implementer", prompt, "implement")
        except StepFailed as e:
            return self._end_iteration(f"failed: {e}")
        self._set_source(proposal.source, "implementer")
        return "compile"

    def _set_source(self, source: str, origin: Literal["implementer", "debugger", "autotuner"]) -> None:
        cur = self.state.current
        cur.source, cur.compile, cur.validation = source, None, None
        n = len(cur.attempts)
        cur.attempts.append(Attempt(n=n, origin=origin, outcome="pending"))
        self.store.write_text(f"{self._dir()}/kernel-{n}.py", source)
        self.store.write_text(f"{self._dir()}/kernel.py", source)

    def _attempt_failed(self, outcome: str, error: str) -> Step:
        cur = self.state.current
        attempt = cur.attempts[-1]
        attempt.outcome, attempt.error = outcome, error[:4000]  # type: ignore[assignment]
        if attempt.origin == "autotuner":
            return self._autotuned_attempt_failed(outcome, error)
        cur.last_error = error
        cur.failed_sources.append(_norm(cur.source or ""))
        if cur.pending_fix is not None:
            cur.failed_fixes.append(cur.pending_fix)
            cur.pending_fix = None
        return "debug"

    async def _step_compile(self) -> Step:
        cur = self.state.current
        n = cur.attempts[-1].n
        try:
            report = await self.servers[0].compile_kernel(
                cur.source or "", self.config.reference, self.config.target, self.config.size
            )
        except ServerToolError as e:
            return self._attempt_failed("tool_error", f"compile_kernel: {e}")
        cur.compile = report
        self.store.write_json(f"{self._dir()}/compile-{n}.json", report)
        failure = report.get("failure") or {}
        if not report.get("ok") and failure.get("kind") not in SIZE_DEPENDENT:
            return self._attempt_failed("compile_failed", "compile failed: " + _error_text(report))
        # a failure that depends on the shape: validate compiles at the check sizes too and says whether
        # the kernel was written for another shape (shape_specialized) or fails everywhere
        return "validate"

    async def _step_validate(self) -> Step:
        cur = self.state.current
        n = cur.attempts[-1].n
        try:
            report = await self.servers[0].validate_kernel(
                cur.source or "",
                self.config.reference,
                self.config.target,
                self.config.size,
                seeds=self.config.seeds,
                # no seed_offset: the server draws fresh seeds for every validation (a kernel cannot predict them)
                **({"check_sizes": self.config.check_sizes} if self.config.check_sizes else {}),
            )
        except ServerToolError as e:
            return self._attempt_failed("tool_error", f"validate_kernel: {e}")
        cur.validation = report
        self.store.write_json(f"{self._dir()}/validate-{n}.json", report)
        compiled = cur.compile or {}
        kind = (report.get("failure") or {}).get("kind")
        if not compiled.get("ok", True) and not report.get("ok") and kind != "shape_specialized":
            # the compile failed at every size validate tried: a compile failure, not a shape's
            return self._attempt_failed("compile_failed", "compile failed: " + _error_text(compiled))
        if not report.get("ok"):
            return self._attempt_failed("validation_failed", "validation failed: " + _error_text(report))
        if self.config.test_cases > 0:
            return "test"
        return self._verified()

    def _verified(self) -> Step:
        """The attempt passed validation (and its extra cases): profile it, or keep it unprofiled."""
        cur = self.state.current
        cur.attempts[-1].outcome = "verified"
        cur.verified, cur.pending_fix = True, None
        if not self.config.profile:
            cur.score = Score(basis="none", label="not profiled (--no-profile)")
            self._consider_best()
            return self._end_iteration("verified")
        return "profile"

    async def _step_debug(self) -> Step:
        cur = self.state.current
        if cur.debug_used >= self.config.max_debug:
            return self._end_iteration(
                f"failed: {cur.debug_used} debug attempt(s) used (--max-debug {self.config.max_debug}); "
                f"last error: {(cur.last_error or '').splitlines()[0][:300] if cur.last_error else 'none'}"
            )
        cur.debug_used += 1
        prompt = render_debug_prompt(
            cur.source or "",
            cur.last_error or "",
            failed_fixes=[
                Diagnosis.model_validate(f) if "fixed_source" in f else f for f in cur.failed_fixes
            ],
            chip=self.state.chip,
            task_spec=self.config.task_spec,
            examples=await self._examples("debugger", error=cur.last_error or ""),
            analysis=await self._compiler_analysis(cur.source or ""),
        )
        try:
            diagnosis: Diagnosis = await self._ask("debugger", prompt, "debug")
        except StepFailed as e:
            cur.failed_fixes.append({"fix_summary": "(no usable reply)", "cause": str(e)[:500]})
            return "debug"
        fixed = _norm(diagnosis.fixed_source)
        if fixed in cur.failed_sources or fixed == _norm(cur.source or ""):
            cur.failed_fixes.append(
                diagnosis.model_dump() | {"rejected": "identical to a source that already failed"}
            )
            cur.attempts.append(
                Attempt(
                    n=len(cur.attempts),
                    origin="debugger",
                    outcome="duplicate_rejected",
                    error="identical to a failed source; not evaluated",
                )
            )
            return "debug"
        cur.pending_fix = diagnosis.model_dump()
        self._set_source(diagnosis.fixed_source, "debugger")
        return "compile"

    async def _step_profile(self) -> Step:
        cur = self.state.current
        report, error = await self._profile(cur.source or "")
        cur.profile = report
        if report is not None:
            self.store.write_json(f"{self._dir()}/{self._evidence('profile')}", report)
            cur.trace_summary = report.get("trace_summary")
            if cur.trace_summary is None and report.get("trace_path"):
                try:
                    cur.trace_summary = await self.servers[0].summarize_trace(report["trace_path"])
                except ServerToolError:
                    cur.trace_summary = None  # a trace outside the workspace: the report still stands
            if cur.trace_summary is not None:
                self.store.write_json(f"{self._dir()}/{self._evidence('trace_summary')}", cur.trace_summary)
        cur.score = (
            score_profile(report)
            if report and report.get("ok")
            else Score(basis="none", label=error or "profile failed")
        )
        self._consider_best()
        if report is None or not report.get("ok"):
            return self._end_iteration(f"verified; profile failed: {error or _error_text(report)}")
        return "analyze"

    async def _profile(self, source: str) -> tuple[dict | None, str | None]:
        """Profile on the server known to hold the chip, else each in turn until one measures natively."""
        order = list(range(len(self.servers)))
        if self.state.profile_server is not None:
            order = [self.state.profile_server]
        first: tuple[dict | None, str | None] = (None, None)
        for i in order:
            try:
                report = await self.servers[i].profile_kernel(
                    source, self.config.reference, self.config.target, self.config.size
                )
            except ServerToolError as e:
                if first == (None, None):
                    first = (None, f"profile_kernel: {e}")
                continue
            if score_profile(report).basis == "measured":
                self.state.profile_server = i
                return report, None
            if first[0] is None:
                first = (report, None)
        return first

    async def _step_analyze(self) -> Step:
        cur = self.state.current
        prompt = render_analyze_profile_prompt(
            cur.profile or {},
            cur.trace_summary,
            self.state.chip,
            kernel=cur.source,
            analysis=await self._compiler_analysis(cur.source or ""),
        )
        try:
            analysis = await self._ask("profile_analyst", prompt, "analyze")
        except StepFailed as e:
            return self._end_iteration(f"verified; analysis failed: {e}")
        cur.analysis = analysis.model_dump()
        self.store.write_json(f"{self._dir()}/{self._evidence('analysis')}", analysis)
        if self.config.autotune and not cur.autotune_done:
            return "autotune"
        return self._end_iteration("verified (autotuned)" if self._autotuned() else "verified")

    async def _compiler_analysis(self, source: str) -> dict | None:
        """`analyze_kernel` for TPU targets (the compiler's schedule: units, spills, VMEM); None otherwise.

        A server without the tool, or a kernel the analysis cannot compile, leaves the prompt without it.
        """
        if not source or not self.config.target.startswith("tpu"):
            return None
        try:
            report = await self.servers[0].call(
                "analyze_kernel",
                {
                    "kernel_source": source,
                    "reference": self.config.reference,
                    "target": self.config.target,
                    "size": self.config.size,
                },
            )
        except Exception:  # noqa: BLE001 - best effort: the prompt stands without the analysis
            return None
        return report if isinstance(report, dict) and report.get("summary") else None

    def _autotuned(self) -> bool:
        cur = self.state.current
        return bool(cur.attempts) and cur.attempts[-1].origin == "autotuner"

    def _evidence(self, name: str) -> str:
        """profile.json etc. for the iteration's kernel; `<name>-<n>.json` for an autotuned attempt, so the
        evidence of the kernel it tried to beat stays on disk."""
        return f"{name}-{self.state.current.attempts[-1].n}.json" if self._autotuned() else f"{name}.json"

    def _snapshot_verified(self) -> None:
        cur = self.state.current
        cur.pre_autotune = {
            "source": cur.source,
            "compile": cur.compile,
            "validation": cur.validation,
            "profile": cur.profile,
            "trace_summary": cur.trace_summary,
            "analysis": cur.analysis,
            "score": cur.score.model_dump() if cur.score else None,
        }

    def _autotuned_attempt_failed(self, outcome: str, error: str) -> Step:
        """An autotuned config that fails is data: the iteration keeps the kernel it already verified."""
        cur = self.state.current
        saved = cur.pre_autotune or {}
        for key in ("source", "compile", "validation", "profile", "trace_summary", "analysis"):
            setattr(cur, key, saved.get(key))
        cur.score = Score.model_validate(saved["score"]) if saved.get("score") else None
        cur.verified = True
        self.store.write_text(f"{self._dir()}/kernel.py", cur.source or "")
        first = error.splitlines()[0][:300] if error else outcome
        if cur.autotune is not None:
            cur.autotune["decision"] += (
                f"; the rendered config failed ({outcome}): {first}; kept the verified kernel"
            )
            self.store.write_json(f"{self._dir()}/autotune.json", cur.autotune)
        self.reporter.note(f"autotuned config failed ({outcome}): {first}")
        return self._end_iteration(f"verified; autotuned config failed: {first}")

    # ---- bookkeeping -------------------------------------------------------------------------------

    def _consider_best(self) -> None:
        cur, best = self.state.current, self.state.best
        if not cur.verified or cur.score is None:
            return
        if best is None or cur.score.key() < best.score.key():
            sha = (cur.validation or {}).get("kernel_sha256") or (cur.compile or {}).get("kernel_sha256")
            self.state.best = Best(
                iteration=cur.index,
                origin=cur.attempts[-1].origin if cur.attempts else "implementer",
                source=cur.source or "",
                kernel_sha256=sha,
                score=cur.score,
                target_size=(cur.validation or {}).get("size"),
                validated_at=[
                    c["size"]
                    for c in (cur.validation or {}).get("checks", [])
                    if c.get("what") == "validate" and c.get("ok")
                ],
                numerics=(cur.validation or {}).get("error_summary") or "",
                parts=parts_line((cur.validation or {}).get("work")),
                vs_xla=profile_vs_xla(cur.profile, self.config.target),
            )
            self.store.write_text("best_kernel.py", cur.source or "")

    def _end_iteration(self, outcome: str) -> Step:
        st, cur = self.state, self.state.current
        cur.outcome = outcome
        self.store.write_json(
            f"{self._dir()}/cost.json",
            {
                "ledger_calls_so_far": self.ledger.calls,
                "usd_so_far": self.ledger.total_cost_usd,
                "tokens_so_far": self.ledger.total_usage.total_tokens,
            },
        )
        st.feedback = self._feedback(cur)
        st.finished.append(cur)
        st.iteration += 1
        st.current = IterationState(index=st.iteration)
        return "plan" if st.iteration <= self.config.iterations else "done"

    def _feedback(self, cur: IterationState) -> str:
        lines = [f"Iteration {cur.index}: {cur.outcome}."]
        if cur.score is not None:
            lines.append(f"Timing: {cur.score.label}.")
        if cur.analysis:
            lines.append(
                f"Profile analysis: bottleneck {cur.analysis.get('bottleneck')}; next move: {cur.analysis.get('next_move')}"
            )
        if not cur.verified and cur.last_error:
            lines.append(f"Last error: {cur.last_error[:1500]}")
        for f in cur.failed_fixes[-3:]:
            lines.append(f"Failed fix: {f.get('fix_summary', '')}")
        if self.state.best:
            lines.append(
                f"Best so far: iteration {self.state.best.iteration}, {self.state.best.score.label}."
            )
        return "\n".join(lines)

    def summary(self) -> dict:
        st, best = self.state, self.state.best
        basis = best.score.basis if best else "none"
        why = {
            "measured": "compiled for the target, validated on fresh inputs, fastest measured time on the target chip",
            "estimate": "compiled for the target, validated on fresh inputs, fastest by the server's static estimate "
            "(the target chip was not present: an estimate, not a measurement)",
            "none": "compiled for the target and validated on fresh inputs; no measured time or estimate for this "
            "target, so the first verified kernel is kept",
        }[basis]
        u = self.ledger.total_usage
        return {
            "task": self.config.task,
            "reference": self.config.reference,
            "target": self.config.target,
            "size": self.config.size,
            "model": self.config.model,
            "run_dir": str(self.store.root),
            "best": None
            if best is None
            else {
                "iteration": best.iteration,
                "origin": best.origin,
                "kernel_sha256": best.kernel_sha256,
                "path": str(self.store.path("best_kernel.py")),
                "time_us": best.score.time_us,
                "time_basis": best.score.basis,
                "label": best.score.label,
                "target_size": best.target_size,
                "validated_at": best.validated_at,
                "numerics": best.numerics,
                "parts": best.parts,
                "vs_xla": best.vs_xla.model_dump() if best.vs_xla else None,
                "vs_xla_line": best.vs_xla.line() if best.vs_xla else None,
                "why_best": why,
            },
            "measured_vs_estimate": basis,
            "iterations_planned": self.config.iterations,
            "iterations_finished": len(st.finished),
            "iterations": [
                {
                    "iteration": it.index,
                    "outcome": it.outcome,
                    "verified": it.verified,
                    "debug_attempts": it.debug_used,
                    "attempts": [a.model_dump() for a in it.attempts],
                    "score": it.score.model_dump() if it.score else None,
                    "tests": self._tests_summary(it),
                    "autotune": None
                    if it.autotune is None
                    else {
                        k: it.autotune.get(k)
                        for k in ("basis", "best_config", "best_time_us", "baseline_time_us", "beats_current")
                    }
                    | {"decision": it.autotune.get("decision")},
                }
                for it in st.finished
            ],
            "steps": len(st.steps),
            "cache_hits": self.eval_cache.hits,
            "spend": {
                "usd": round(self.ledger.total_cost_usd, 6),
                "unpriced_calls": self.ledger.unpriced_calls,
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "calls": self.ledger.calls,
                "minutes": round(st.elapsed_s / 60.0, 3),
            },
            "stop_reason": st.stop_reason,
        }

    def write_summary(self) -> dict:
        summary = self.summary()
        self.store.write_json("summary.json", summary)
        return summary


def parts_line(work: dict | None) -> str:
    """Which parts of the validated program are kernels and which XLA runs beside them, from the judge's
    work census (flops counted inside and outside the pallas_calls): a composite that leaves an op no
    Pallas TPU body lowers to XLA says so, with that op's share of the counted flops."""
    if not work:
        return ""
    kernels = work.get("data_flow_pallas_calls") or []
    n = work.get("num_pallas_calls", len(kernels))
    names = ", ".join(k.split("(", 1)[-1].rstrip(")") for k in kernels)
    line = f"{n} kernel{'s' if n != 1 else ''}" + (f" ({names})" if names else "")
    outside = work.get("outside_flops") or {}
    total = sum(outside.values()) + sum((work.get("inside_flops") or {}).values())
    if not sum(outside.values()):
        return f"{line}; nothing left to XLA"
    share = sum(outside.values()) / total if total else 0.0
    return f"{line}; left to XLA: {', '.join(sorted(outside))} ({share:.0%} of the counted flops)"


def _validate_detail(report: dict | None) -> str:
    """The validate step's progress line, from what its report says ran (never a fixed claim)."""
    if not report:
        return "not validated"
    sizes = [c.get("size") for c in report.get("checks", []) if c.get("what") == "validate" and c.get("ok")]
    if report.get("ok"):
        return f"validated on fresh inputs at {', '.join(sizes) or 'its size'}"
    kind = (report.get("failure") or {}).get("kind", "failed")
    return f"validation failed ({kind})"
