"""The suite's score table: printed (rich), and written as score.json, score.csv and report.html.

The HTML page is self-contained (inline SVG, no scripts, no network): the summary per tier, one bar
chart row per task (speedup vs the XLA baseline and vs the expert reference, log scale, 1x marked; the
target size and shapes, the sizes validation checked, the estimator's tier; for a task that is not
correct, the failing case, its size, kind and summary; relative links to the scored kernel and its
verdict JSON), and MaxKernel's ranking. Estimate rows are labeled as such wherever a number appears.
"""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path

from maxkernel.tpu_tools.cli import tables
from maxkernel.tpu_tools.profile.scoreboard import SuiteScore, TaskRow, row_vs_xla


def write_all(suite_dir: Path, rows: list[TaskRow], sc: SuiteScore, meta: dict) -> dict[str, str]:
    suite_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": suite_dir / "score.json",
        "csv": suite_dir / "score.csv",
        "html": suite_dir / "report.html",
    }
    paths["json"].write_text(
        json.dumps(
            {
                "meta": meta,
                "score": sc.model_dump(mode="json"),
                "rows": [r.model_dump(mode="json") for r in rows],
            },
            indent=2,
        )
    )
    with open(paths["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(TaskRow.model_fields))
        w.writeheader()
        for r in rows:
            d = r.model_dump(mode="json")
            for key in ("correct_evidence", "check_sizes"):
                d[key] = "; ".join(d[key])
            for key in ("input_shapes", "output_shapes"):
                d[key] = " ".join(d[key])
            d["failed"] = _failed_text(r)
            w.writerow(d)
    paths["html"].write_text(render_html(rows, sc, meta), encoding="utf-8")
    return {k: str(v) for k, v in paths.items()}


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _tier(row: TaskRow) -> str:
    """The row's tier, with the estimator's own tier (model or llo) for an estimate, and the XLA baseline's
    where it differs (then the row has no speedup)."""
    kernel = (
        f"estimate/{row.estimate_tier}" if row.tier == "estimate" and row.estimate_tier else row.tier or "-"
    )
    if row.baseline_tier and row.baseline_tier != kernel and row.baseline_time_us is not None:
        return f"{kernel}, XLA {row.baseline_tier}"
    return kernel


def _failed_text(row: TaskRow) -> str:
    f = row.failed
    return "" if f is None else f"{f.case} at size {f.size or '?'}: {f.kind}: {f.summary}"


def summary_lines(sc: SuiteScore) -> list[str]:
    lines = [f"correct: {sc.correct}/{sc.tasks} ({100 * sc.fraction_correct:.0f}%), finished {sc.finished}"]
    for tier, t in sc.by_tier.items():
        label = " (static estimate, not measured)" if tier == "estimate" else " (measured on the chip)"
        lines.append(
            f"{tier}{label}: fast_1 {t.fast_1:.2f}  fast_1.2 {t.fast_1_2:.2f}  "
            f"geomean {_fmt(t.geomean_speedup, '.3f')}x over {t.rows} correct tasks"
        )
    if not sc.by_tier:
        lines.append("no correct task has a same-tier speedup")
    lines.append(
        f"vs expert Pallas reference: {sc.match_or_beat_expert}/{sc.with_expert} match or beat, "
        f"{sc.beat_expert} beat"
    )
    return lines


def score_table(rows: list[TaskRow], name=lambda s: s):
    """One line per task, its name shown as `name(task)` (tpu_tools/cli/tables.py fits it to the terminal)."""
    cells = [
        [name(r.task), r.status, "yes" if r.correct else "no", _tier(r).replace("estimate", "est."),
         _fmt(r.kernel_time_us), _fmt(r.baseline_time_us), _fmt(r.speedup_vs_baseline, ".2f"),
         _fmt(r.speedup_vs_expert, ".2f")]
        for r in rows
    ]  # fmt: skip
    t = tables.new_table()
    tables.add_name_column(t, "task")
    for k, header in enumerate(("status", "ok", "tier"), start=1):
        tables.add_word_column(t, header, [c[k] for c in cells])
    for header in ("kernel µs", "XLA µs", "x XLA", "x expert"):
        tables.add_number_column(t, header)
    for c in cells:
        t.add_row(*c)
    return t


def print_table(rows: list[TaskRow], sc: SuiteScore) -> None:
    from rich.console import Console

    con = Console(stderr=True, highlight=False)
    tables.print_named(con, lambda name, full: score_table(rows, name), [r.task for r in rows], "tasks")
    con.print("est. = the static estimate for the target chip, not a measurement", markup=False)
    for r in rows:
        if r.note:
            con.print(f"{r.task}: {r.note[:300]}", markup=False)
        if r.port:  # a PyTorch source: its port's check, and the kernel against the source itself
            parity = "not run" if r.source_parity is None else r.source_parity_note
            con.print(f"{r.task}: port {r.port}; source parity: {parity}", markup=False)
    for line in summary_lines(sc):
        con.print(line, markup=False)
    if sc.ranked:
        con.print("ranked (MaxKernel):", markup=False)
        for line in ranked_lines(rows, sc)[:15]:
            con.print(f"  {line}", markup=False)


def ranked_lines(rows: list[TaskRow], sc: SuiteScore) -> list[str]:
    """Per ranked task: the kernel beside XLA, both figures and their tiers (never a bare ratio)."""
    by_task = {r.task: r for r in rows}
    out = []
    for x in sc.ranked:
        vs = row_vs_xla(by_task[x.task]) if x.task in by_task else None
        expert = f"; {x.speedup_vs_expert:.2f}x vs expert" if x.speedup_vs_expert is not None else ""
        out.append(f"{x.task}: {vs.line() if vs else 'no XLA time recorded'}{expert}")
    return out


def _bar_svg(row: TaskRow, width: int = 420) -> str:
    """Two bars on a log2 axis from 1/8x to 8x, the 1x line in the middle."""
    lo, hi = -3.0, 3.0
    scale = (width - 20) / (hi - lo)
    x1 = 10 + (0 - lo) * scale
    parts = [f'<svg width="{width}" height="34" xmlns="http://www.w3.org/2000/svg">']
    for i, (val, color, name) in enumerate(
        ((row.speedup_vs_baseline, "#2e7dd1", "vs XLA"), (row.speedup_vs_expert, "#e08a1e", "vs expert"))
    ):
        y = 3 + i * 15
        if val is None or val <= 0:
            parts.append(f'<text x="{x1 + 4:.0f}" y="{y + 10}" font-size="10" fill="#999">{name}: n/a</text>')
            continue
        xv = 10 + (min(max(math.log2(val), lo), hi) - lo) * scale
        left, w = min(x1, xv), abs(xv - x1)
        parts.append(f'<rect x="{left:.1f}" y="{y}" width="{max(w, 1.5):.1f}" height="12" fill="{color}"/>')
        tx = max(xv, x1) + 4
        anchor = ""
        if tx > width - 90:  # no room right of a long bar: label it on the other side of the 1x line
            tx, anchor = x1 - 4, ' text-anchor="end"'
        parts.append(f'<text x="{tx:.0f}" y="{y + 10}" font-size="10"{anchor}>{name} {val:.2f}x</text>')
    parts.append(f'<line x1="{x1:.1f}" y1="0" x2="{x1:.1f}" y2="34" stroke="#333" stroke-dasharray="2,2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _size_cell(r: TaskRow) -> str:
    e = html.escape
    shapes = ""
    if r.input_shapes or r.output_shapes:
        shapes = (
            f"<div class=shapes>{e(', '.join(r.input_shapes))} &rarr; {e(', '.join(r.output_shapes))}</div>"
        )
    return f"{e(r.size or '-')}{shapes}"


def _why_cell(r: TaskRow) -> str:
    """For a task that is not correct: the failing case, its size, kind and summary; then the links to
    the scored kernel and its verdicts (relative to the page: the suite directory moves with them)."""
    e = html.escape
    parts = []
    if r.failed is not None and not r.correct:
        f = r.failed
        parts.append(
            f"<div class=failed><b>{e(f.case)}</b> at size <b>{e(f.size or '?')}</b>: "
            f"<code>{e(f.kind)}</code> {e(f.summary[:300])}</div>"
        )
    elif r.note:
        parts.append(f"<div>{e(r.note[:200])}</div>")
    links = [
        f'<a href="{e(path)}">{name}</a>'
        for path, name in ((r.kernel_file, "kernel"), (r.verdict_file, "verdict JSON"))
        if path
    ]
    if links:
        parts.append("<div>" + " &middot; ".join(links) + "</div>")
    return "".join(parts)


def render_html(rows: list[TaskRow], sc: SuiteScore, meta: dict) -> str:
    e = html.escape
    trs = []
    for r in rows:
        tier = _tier(r)
        tier_cell = f'<span class="est">{e(tier)}</span>' if r.tier == "estimate" else e(tier)
        trs.append(
            f"<tr><td>{e(r.task)}</td><td>{e(r.status)}</td><td>{'yes' if r.correct else 'no'}</td>"
            f"<td>{_size_cell(r)}</td><td>{e(', '.join(r.check_sizes) or '-')}</td>"
            f"<td>{tier_cell}</td><td>{_fmt(r.kernel_time_us)}</td><td>{_fmt(r.baseline_time_us)}</td>"
            f"<td>{_fmt(r.expert_time_us)}</td><td>{_bar_svg(r)}</td><td class=note>{_why_cell(r)}</td></tr>"
        )
    ranked = "".join(f"<li>{e(line)}</li>" for line in ranked_lines(rows, sc))
    summary = "".join(f"<li>{e(line)}</li>" for line in summary_lines(sc))
    settings = e(json.dumps(meta.get("settings", {}), indent=1))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>maxkernel suite</title>
<style>
body {{ font-family: sans-serif; margin: 24px; }}
table {{ border-collapse: collapse; }} td, th {{ border-bottom: 1px solid #ddd; padding: 3px 8px; font-size: 13px; }}
.est {{ background: #fff3cd; padding: 1px 4px; }} .note {{ color: #666; max-width: 320px; font-size: 11px; }}
.shapes {{ color: #666; font-size: 11px; }} .failed {{ color: #a12; }}
</style></head><body>
<h1>maxkernel suite: {e(str(meta.get("suite_dir", "")))}</h1>
<p>Bars: speedup on a log axis (1/8x to 8x), the dashed line is 1x. <span class="est">estimate</span> rows are the
static model's numbers for the target chip, not measurements; they never share a geomean with measured rows.</p>
<h2>Summary</h2><ul>{summary}</ul>
<h2>Per task</h2>
<p>Size: the target size (compiled, estimated and scored there) with the reference's input and output shapes;
checked at: the sizes validation ran at (fresh seeds, then each tester case). Tier: measured, or the estimate
with its estimator's tier (model or llo).</p>
<table><tr><th>task</th><th>status</th><th>correct</th><th>size, shapes</th><th>checked at</th><th>tier</th>
<th>kernel µs</th><th>XLA µs</th><th>expert µs</th><th>speedup</th><th>why / evidence</th></tr>
{"".join(trs)}
</table>
<h2>Ranked (MaxKernel's report)</h2><ol>{ranked}</ol>
<h2>Settings</h2><pre>{settings}</pre>
</body></html>
"""
