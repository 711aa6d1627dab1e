"""The kernel beside XLA wherever a result is printed: both figures, the ratio, their tiers.

The figures come from real estimates: the search's estimate evaluator costs a Pallas matmul and, beside
it, the reference's own XLA program for the same chip (the pair a profile report carries), and a kernel
at the `llo` tier from a recorded libtpu dump. Every summary (Auto, search, model, suite) must print the
line those numbers make, never a ratio alone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from maxkernel.clients.model.report import ModelReport, RegionRow, text
from maxkernel.clients.search.graph import make_node
from maxkernel.clients.search.objective import EstimateEvaluator
from maxkernel.clients.search.report import _brief
from maxkernel.clients.suite.report import _tier, ranked_lines
from maxkernel.tpu_tools.profile.scoreboard import (
    TaskRow,
    profile_vs_xla,
    reference_tier_time,
    row_vs_xla,
    score,
    tier_time,
    timed_row,
    vs_xla,
)

ROOT = Path(__file__).resolve().parents[3]
TARGET = "tpu-v6e"


@pytest.fixture(scope="module")
def evaluated():
    """A Pallas matmul and the matmul reference's XLA program, both estimated for v6e at the full size."""
    ev = EstimateEvaluator(str(ROOT / "examples" / "matmul_reference.py"), TARGET, "full")
    source = (ROOT / "examples" / "matmul_kernel.py").read_text()
    verdict = ev.estimate(source)
    assert verdict.status == "valid" and verdict.profile and verdict.profile.get("reference_estimate")
    return source, verdict


def test_the_line_is_built_from_both_estimates(evaluated):
    _, verdict = evaluated
    prof = verdict.profile
    k, x = prof["static_estimate"], prof["reference_estimate"]
    vs = profile_vs_xla(prof, TARGET)
    assert vs is not None and vs.ratio == pytest.approx(
        x["estimated_time_us"] / k["estimated_time_us"], rel=1e-3
    )
    tiers = k["tier"] if k["tier"] == x["tier"] else f"kernel {k['tier']}, XLA {x['tier']}"
    assert vs.line() == (
        f"kernel {k['estimated_time_us']:.4g} µs vs XLA {x['estimated_time_us']:.4g} µs "
        f"({x['estimated_time_us'] / k['estimated_time_us']:.3g}×), estimate ({tiers})"
    )
    # Nothing to stand beside: no line (the summaries then say there is no XLA time).
    assert profile_vs_xla({"static_estimate": k}, TARGET) is None


def test_an_llo_kernel_beside_a_model_xla_names_both_tiers(evaluated):
    """The kernel read from a recorded libtpu dump (tier llo), XLA's program at tier model: the line
    gives the ratio and names both tiers; a measurement beside an estimate gets no ratio at all."""
    from tests.tpu_tools.cost.test_inner_loops import LOOPS, _estimate

    _, verdict = evaluated
    llo = _estimate(LOOPS.looped, 4 * 8 * 8, "v5e_loop8")
    xla = verdict.profile["reference_estimate"]
    vs = vs_xla(
        (llo.estimated_time_us, "estimate/llo"), (xla["estimated_time_us"], f"estimate/{xla['tier']}")
    )
    assert vs is not None and vs.line().endswith(f"estimate (kernel llo, XLA {xla['tier']})")
    mixed = vs_xla((llo.estimated_time_us, "measured"), (xla["estimated_time_us"], "estimate/model"))
    assert mixed is not None and mixed.ratio is None
    assert (
        "×" not in mixed.line()
        and "kernel measured" in mixed.line()
        and "XLA estimate (model)" in mixed.line()
    )


def test_search_summary_and_cli_print_the_line(evaluated, capsys):
    from maxkernel.clients.search.cli import _print_search

    source, verdict = evaluated
    node = make_node(source).model_copy(
        update={"status": "valid", "verdict": verdict, "time_us": verdict.time_us, "time_label": "estimate"}
    )
    brief = _brief(node, None)
    line = profile_vs_xla(verdict.profile, TARGET).line()
    assert brief["vs_xla_line"] == line
    out = {"run_dir": "r", "nodes": 1, "evaluations": 1, "cache_hits": 0, "stopped": "done", "best": brief}
    _print_search(out, as_json=False)
    assert line in capsys.readouterr().out.splitlines()


def test_auto_summary_ends_with_the_line(evaluated, capsys):
    from maxkernel.clients.cli import _print_summary

    _, verdict = evaluated
    vs = profile_vs_xla(verdict.profile, TARGET)
    k_us, k_tier = tier_time(verdict.profile, TARGET)
    best = {"iteration": 1, "label": "estimate", "path": "best_kernel.py", "target_size": "full",
            "time_us": k_us, "time_basis": k_tier, "validated_at": ["small"], "vs_xla_line": vs.line()}  # fmt: skip
    spend = {"usd": 0.0, "input_tokens": 0, "output_tokens": 0, "calls": 0}
    summary = {"stop_reason": "completed", "run_dir": "r", "spend": spend, "target": TARGET}
    _print_summary(summary | {"best": best})
    assert capsys.readouterr().err.strip().splitlines()[-1] == vs.line()
    _print_summary(summary | {"best": best | {"vs_xla_line": None}})
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"kernel {k_us:.4g} µs") and "no XLA time" in last and "×" not in last


def test_suite_and_model_reports_show_both_figures_and_tiers(evaluated):
    _, verdict = evaluated
    prof = verdict.profile
    row = timed_row(TaskRow(task="matmul", status="done", correct=True, target=TARGET), tier_time(prof, TARGET),
                    reference_tier_time(prof, TARGET))  # fmt: skip
    line = profile_vs_xla(prof, TARGET).line()
    assert row_vs_xla(row).line() == line
    assert ranked_lines([row], score([row])) == [f"matmul: {line}"]
    # A row written before baseline_tier existed: its tiers matched (it has a speedup), so the line stands.
    old = TaskRow.model_validate(json.loads(row.model_dump_json()) | {"baseline_tier": None})
    assert row_vs_xla(old).line() == line
    # Tiers that differ: no speedup in the score, and the tier cell names both.
    mixed = timed_row(TaskRow(task="m", status="done", correct=True, target=TARGET),
                      (row.kernel_time_us, "estimate/llo"), (row.baseline_time_us, "estimate/model"))  # fmt: skip
    assert mixed.speedup_vs_baseline is None and _tier(mixed) == "estimate/llo, XLA estimate/model"
    report = ModelReport(
        model="m", run_dir="r", mode="auto", target=TARGET, size="full", check_sizes=["small"], tier="model",
        step_before_us=1.0, step_after_us=1.0, speedup=1.0, arithmetic="-",
        regions=[RegionRow(region="mm", count=1, share=1.0, before_us=1.0, verdict="correct", vs_xla=row_vs_xla(row))],
    )  # fmt: skip
    assert line in text(report)


def test_the_estimate_evaluator_costs_the_xla_baseline_once(evaluated):
    ev = EstimateEvaluator(str(ROOT / "examples" / "matmul_reference.py"), TARGET, "full")
    first = ev.xla_estimate()
    assert first is not None and first["chip"] == TARGET and ev.xla_estimate() is first
    assert asyncio.iscoroutinefunction(ev.evaluate)


def _report(kernel: tuple[float, str], reference: tuple[float, str], pallas: bool) -> dict:
    """A profile report's two estimates (off the chip) and its reference's kind."""
    return {
        "static_estimate": {"estimated_time_us": kernel[0], "tier": kernel[1], "chip": TARGET},
        "reference_estimate": {"estimated_time_us": reference[0], "tier": reference[1], "chip": TARGET},
        "reference": {"pallas": pallas},
    }


def test_a_pallas_reference_is_the_baseline_and_gets_no_ratio_across_tiers():
    same = profile_vs_xla(_report((4370.0, "llo"), (4603.0, "llo"), pallas=True), TARGET)
    assert same is not None and same.against == "baseline"
    assert same.line() == "kernel 4370 µs vs baseline 4603 µs (1.05×), estimate (llo)"
    across = profile_vs_xla(_report((4370.0, "llo"), (4603.0, "model"), pallas=True), TARGET)
    assert across is not None and across.ratio is None
    assert "no ratio" in across.line() and "baseline estimate (model)" in across.line()
    plain = profile_vs_xla(_report((4370.0, "llo"), (4603.0, "llo"), pallas=False), TARGET)
    assert plain is not None and plain.line().startswith("kernel 4370 µs vs XLA 4603 µs")
