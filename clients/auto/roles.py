"""The Auto loop's two optional roles: the tester's extra input cases and the autotuner's sweep.

Both keep the loop's rule: models propose, the server judges. The tester is asked once per task (its
cases are cached in the run's journal, so a resumed run never asks again); each case is a
`validate_kernel` call on fresh seeds, and a case the reference itself cannot build or run is logged
and skipped, never blamed on the kernel. The autotuner proposes a space and a `${name}` template; the
server's `autotune_kernel` sweeps it, and a config that beats the iteration's score (estimate against
estimate, measured against measured) is rendered and sent through compile -> validate -> test ->
profile as one more attempt, so its evidence comes from the normal path.
"""

from __future__ import annotations

import hashlib
from string import Template
from typing import Any

from maxkernel.clients.auto.state import IterationState, Step, StepFailed, _error_text
from maxkernel.clients.mcp_client import ServerToolError
from maxkernel.subagents import (
    OutputParseError,
    Role,
    TestCase,
    TuningSpace,
    parse_output,
    render_autotune_prompt,
    render_test_prompt,
)
from maxkernel.subagents.parse import extract_python


def _input_case(case: TestCase) -> dict[str, Any]:
    """The server's InputCase from the tester's TestCase (`why` stays in the run's records).

    No size case is added here: validate itself runs every kernel at the check sizes (small and a
    derived larger size) and fails one written for a single shape as `shape_specialized`.
    """
    return {"name": case.name, "sizes": case.sizes, "distribution": case.distribution, "scale": case.scale}


def _case_text(case: TestCase) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in case.sizes.items())
    scale = f" scale {case.scale:g}" if case.scale is not None else ""
    return f"{case.distribution}{scale}" + (f", sizes {sizes}" if sizes else "")


def _parse_tuning(role: Role, text: str) -> tuple[TuningSpace, str]:
    """The TuningSpace JSON and the ```python template beside it; either missing is a parse error."""
    space = parse_output(role, text)
    template = extract_python(text)
    if "$" not in template:
        raise OutputParseError(
            "the ```python template has no ${name} placeholders: write one for each tunable",
            missing=["python"],
        )
    return space, template


class RoleSteps:
    """Mixed into AutoLoop: the `test` and `autotune` steps."""

    # ---- tester ------------------------------------------------------------------------------------

    async def _cases(self) -> list[TestCase]:
        """The tester's cases for this task: asked once, then read from the journal."""
        st, cfg = self.state, self.config
        key = f"{cfg.reference}|{cfg.size}|{cfg.target}"
        if st.test_cases is not None and st.test_cases_for == key:
            return [TestCase.model_validate(c) for c in st.test_cases]

        prompt = render_test_prompt(cfg.task_spec, st.chip, kernel=st.current.source)
        try:
            cases = (await self._ask("tester", prompt, "test")).cases
        except StepFailed as e:
            self.reporter.note(f"tester gave no usable cases, extra tests skipped for this task: {e}")
            cases = []
        st.test_cases, st.test_cases_for = [c.model_dump() for c in cases], key
        self.store.write_json("test_cases.json", {"for": key, "cases": st.test_cases})
        self._journal()  # a resume inside this step reuses the cases instead of asking again
        return cases

    async def _step_test(self) -> Step:
        cur = self.state.current
        n = cur.attempts[-1].n
        cases = (await self._cases())[: self.config.test_cases]
        results: list[dict] = []
        failed: tuple[TestCase, str] | None = None
        for case in cases:
            entry: dict[str, Any] = {"case": case.model_dump(), "seed": None}
            try:
                report = await self.servers[0].validate_kernel(
                    cur.source or "",
                    self.config.reference,
                    self.config.target,
                    self.config.size,
                    seeds=1,  # drawn at random by the server, recorded in the report
                    case=_input_case(case),
                    **({"check_sizes": self.config.check_sizes} if self.config.check_sizes else {}),
                    # the standard validation already showed the check can tell; a zeros case must not trip it
                    allow_weak_check=True,
                )
            except ServerToolError as e:
                if " ended with " in str(e):  # the kernel took its process down on these inputs
                    entry |= {"status": "failed", "error": str(e)[:2000]}
                    failed = (case, str(e))
                else:  # the caller's side of the case: e.g. size overrides on a fixed-input reference
                    entry |= {"status": "unusable", "error": str(e)[:2000]}
                    self.reporter.note(f"test case {case.name!r} is unusable, skipped: {str(e)[:200]}")
                results.append(entry)
                if failed:
                    break
                continue
            failure = report.get("failure") or {}
            entry["report"] = report
            entry["seed"] = report.get("seed_offset")
            if report.get("ok"):
                entry["status"] = "passed"
            elif failure.get("kind") == "case_unusable":
                entry |= {"status": "unusable", "error": failure.get("summary", "")}
                self.reporter.note(
                    f"test case {case.name!r} is unusable, skipped: {failure.get('summary', '')}"
                )
            else:
                text = _error_text(report)
                entry |= {"status": "failed", "error": text[:2000]}
                failed = (case, text)
            results.append(entry)
            if failed:
                break  # the debugger gets the first failing case; the rest wait for the fix
        cur.tests.append({"attempt": n, "results": results})
        self.store.write_json(f"{self._dir()}/tests.json", cur.tests)
        if failed is not None:
            case, text = failed
            why = f" (it targets: {case.why})" if case.why else ""
            return self._attempt_failed(
                "test_failed",
                f"extra test case {case.name!r} failed [{_case_text(case)}]{why}; the standard validation "
                f"passed, so the kernel is wrong on these inputs: {text}",
            )
        return self._verified()

    def _tests_detail(self) -> str:
        if not self.state.current.tests:
            return "extra cases"
        results = self.state.current.tests[-1]["results"]
        counts = {
            s: sum(1 for r in results if r.get("status") == s) for s in ("passed", "failed", "unusable")
        }
        return ", ".join(f"{v} {k}" for k, v in counts.items() if v) or "no extra cases"

    @staticmethod
    def _tests_summary(it: IterationState) -> list[dict]:
        return [
            {
                "attempt": t["attempt"],
                "cases": {r["case"]["name"]: r.get("status") for r in t["results"]},
            }
            for t in it.tests
        ]

    # ---- autotuner ---------------------------------------------------------------------------------

    async def _step_autotune(self) -> Step:

        cur, cfg = self.state.current, self.config
        cur.autotune_done = True  # one sweep per iteration, whatever happens below
        baseline = cur.score
        record: dict[str, Any] = {
            "baseline": baseline.model_dump() if baseline else None,
            "baseline_time_us": baseline.time_us if baseline else None,
        }

        def done(decision: str) -> Step:
            record["decision"] = decision
            cur.autotune = record
            self.store.write_json(f"{self._dir()}/autotune.json", record)
            self.reporter.note(f"autotune: {decision}")
            return self._end_iteration("verified")

        if baseline is None or baseline.basis == "none" or baseline.time_us is None:
            return done("skipped: the verified kernel has no measured time or estimate to beat")
        prompt = render_autotune_prompt(cur.source or "", cfg.task_spec, self.state.chip, plan=cur.plan)
        try:
            space, template = await self._ask("autotuner", prompt, "autotune", parse=_parse_tuning)
        except StepFailed as e:
            return done(f"no sweep: {e}")
        tunables = {
            k: [str(v) if isinstance(v, bool) else v for v in vals] for k, vals in space.tunables.items()
        }
        objective = "measured" if baseline.basis == "measured" else "estimate"
        record |= {
            "space": space.model_dump(),
            "template_sha256": hashlib.sha256(template.encode()).hexdigest(),
            "objective": objective,
        }
        self.store.write_text(f"{self._dir()}/autotune_template.py", template)
        try:
            report = await self.servers[0].autotune_kernel(
                template,
                tunables,
                cfg.reference,
                cfg.target,
                cfg.size,
                max_configs=cfg.autotune_max_configs,
                objective=objective,
                check_sizes=cfg.check_sizes,
            )
        except ServerToolError as e:
            return done(f"autotune_kernel refused the sweep: {str(e)[:500]}")
        record["report"] = report
        best = report.get("best")
        record["basis"] = report.get("kind")
        if best is None:
            return done(
                f"no valid config among {report.get('evaluated', 0)} evaluated; kept the verified kernel"
            )
        if report.get("kind") == "measured":
            ms = best.get("measured_median_ms")
            best_us = None if ms is None else float(ms) * 1000.0
        else:
            best_us = best.get("estimate_us")
        record |= {"best_config": best["config"], "best_time_us": best_us}
        if report.get("kind") != baseline.basis or best_us is None:
            record["beats_current"] = False
            return done(
                f"best config ranked by {report.get('kind')}, the kernel by {baseline.basis}: not comparable; kept it"
            )
        record["beats_current"] = best_us < baseline.time_us
        if not record["beats_current"]:
            return done(
                f"best config {best['config']} at {best_us:.2f} us ({objective}) does not beat "
                f"{baseline.time_us:.2f} us; kept the verified kernel"
            )
        try:
            source = Template(template).substitute({k: str(v) for k, v in best["config"].items()})
        except (KeyError, ValueError) as e:
            return done(f"the template does not render with the best config: {e}")
        self._snapshot_verified()
        self._set_source(source, "autotuner")
        record["decision"] = (
            f"best config {best['config']} at {best_us:.2f} us ({objective}) beats {baseline.time_us:.2f} us: "
            f"running it as attempt {cur.attempts[-1].n} (compile, validate, test, profile)"
        )
        cur.autotune = record
        self.store.write_json(f"{self._dir()}/autotune.json", record)
        self.reporter.note(f"autotune: {record['decision']}")
        return "compile"
