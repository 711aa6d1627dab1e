"""Working stand-ins for the suite's tests: a scripted evaluator that answers the tools the suite
calls (evaluate_kernel, validate_kernel, profile_kernel) by formula, and the child process of the
kill -9 test. Run as a script: `python suite_fakes.py SUITE_DIR [--resume]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

BASELINE_US = 100.0  # every task's XLA baseline, estimate tier
EXPERT_US = 40.0  # every task's expert reference, estimate tier


class ScriptedServer:
    """Judges a template kernel by its config (time falls with bigger tiles); counts every call."""

    def __init__(
        self,
        name: str = "scripted",
        delay_s: float = 0.0,
        *,
        overfit: bool = False,
        case_verdicts=None,
        weak_below: int = 0,
    ) -> None:
        """overfit=True: a kernel that is right on the loop's seeds only (wrong on any fresh offset);
        case_verdicts: {case name: failure kind} for the tester's cases that fail; weak_below: a case
        checked on fewer seeds is weak_check (a scalar output a constant matches on one seed)."""
        self.name, self.delay_s, self.overfit = name, delay_s, overfit
        self.case_verdicts = case_verdicts or {}
        self.weak_below = weak_below
        self.case_seeds: list[int] = []  # the seeds of each validate_kernel call, in order
        self.die_after: int | None = None  # calls before this server "dies" (EvaluatorDown from then on)
        self.calls: list[tuple[str, str]] = []

    def _maybe_die(self) -> None:
        from maxkernel.clients.search.evaluator import EvaluatorDown

        if self.die_after is not None and len(self.calls) > self.die_after:
            raise EvaluatorDown(f"{self.name}: connection refused")

    async def tool_versions(self) -> str:
        return "scripted-1"

    def _time_us(self, source: str) -> float:
        from maxkernel.clients.search.templates import read_config

        config = read_config(source) or {}
        blocks = [v for k, v in config.items() if k.startswith("block") and isinstance(v, int)]
        return 4000.0 / max(1, sum(blocks))

    async def evaluate(self, source, task, *, seeds=None):
        from maxkernel.clients.search.graph import NodeVerdict

        self.calls.append(("evaluate", task.reference))
        self._maybe_die()
        await asyncio.sleep(self.delay_s)
        return NodeVerdict(
            status="valid", time_us=self._time_us(source), time_label="estimate", server=self.name
        )

    async def call(self, tool: str, args: dict) -> dict:
        self.calls.append((tool, args["reference"]))
        self._maybe_die()
        await asyncio.sleep(self.delay_s)
        target = args.get("profile_target") or args.get("target")
        if tool == "evaluate_kernel":
            if self.overfit and args.get("seed_offset"):
                failure = {"kind": "wrong_result", "summary": "seed 70000: 3% of elements off"}
                seeds = [{"seed": 70_000 + i, "ok": i != 0} for i in range(args.get("seeds") or 1)]
                target_size = args.get("size") or "full"  # as the server: compiled at the target first,
                checks = [  # then interpreted at the check sizes, where the seed failed
                    {"size": target_size, "what": "compile", "ok": True},
                    {"size": "small", "what": "validate", "ok": False, "failure_kind": failure["kind"]},
                ]
                validation = {
                    "ok": False,
                    "size": target_size,
                    "check_sizes": [{"name": "small", "dims": {}}, {"name": "derived", "dims": {}}],
                    "checks": checks,
                    "per_seed": seeds,
                    "failure": failure,
                }
                return {"ok": False, "stopped_at": "validate", "validation": validation}
            est = {"chip": target, "estimated_time_us": self._time_us(args["kernel_source"])}
            return {
                "ok": True,
                "kernel_sha256": "f" * 64,
                "stopped_at": None,
                "profile": {
                    "static_estimate": est,
                    "reference_estimate": {"chip": target, "estimated_time_us": BASELINE_US},
                },
            }
        if tool == "describe_reference":  # the shapes the report shows
            return {
                "inputs": [{"shape": [8, 128], "dtype": "float32"}],
                "out_specs": [{"shape": [8], "dtype": "float32"}],
            }
        if tool == "validate_kernel":
            self.case_seeds.append(args.get("seeds") or 1)
            kind = self.case_verdicts.get((args.get("case") or {}).get("name"))
            if kind is None and (args.get("seeds") or 1) < self.weak_below:
                kind = "weak_check"
            return {"ok": True} if kind is None else {"ok": False, "failure": {"kind": kind, "summary": kind}}
        if tool == "profile_kernel":  # only the expert is profiled on its own (the baseline is evaluate's)
            assert "pallas_call" in args["kernel_source"], "the baseline is never profiled as a candidate"
            return {"ok": True, "static_estimate": {"chip": target, "estimated_time_us": EXPERT_US}}
        raise AssertionError(f"unexpected tool {tool}")


def suite_args(suite_dir: str, *, resume: bool = False, tasks: str = "8p,12p,19k", concurrency: int = 1):
    from maxkernel.clients.cli import build_parser

    argv = ["suite", "--quiet"]
    argv += ["--resume", suite_dir] if resume else ["--run-dir", suite_dir, "--reference", tasks]
    argv += ["--mode", "search", "--concurrency", str(concurrency), "--task-max-evaluations", "6"]
    return build_parser().parse_args(argv)


def main() -> None:
    from maxkernel.clients.suite.cli import run_suite

    p = argparse.ArgumentParser()
    p.add_argument("suite_dir")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--delay", type=float, default=0.3)
    a = p.parse_args()
    args = suite_args(a.suite_dir, resume=a.resume)
    out = asyncio.run(run_suite(args, servers=[ScriptedServer(delay_s=a.delay)]))
    print(Path(out["suite_dir"]).name, file=sys.stderr)


if __name__ == "__main__":
    main()
