"""A search run as one self-contained HTML page (inline SVG, no network) and as a JSON summary.

The page shows the search tree (colour = status, size and label = speedup over the root, or the
labeled estimate), best-so-far against evaluations, spend over time, and the best kernel with its
evidence (verdicts and the re-verification with new seeds).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from maxkernel.clients.search.graph import Node
from maxkernel.clients.search.store import GraphStore

COLORS = {
    "valid": "#2e9d5b",
    "invalid": "#d9534f",
    "failed": "#8e44ad",
    "pending": "#aaaaaa",
    "running": "#f0ad4e",
}


def summary(store: GraphStore) -> dict[str, Any]:
    """What scripts need: the best node (re-verified or not), counts, spend, the curve."""
    nodes = store.nodes()
    meta = store.meta()
    root = next((n for n in nodes if n.id == meta.get("root")), None)
    evaluated = sorted((n for n in nodes if n.eval_seq is not None), key=lambda n: n.eval_seq or 0)
    curve, best = [], None
    count = 0
    for n in evaluated:
        if not n.cached:
            count += 1
        if n.status == "valid" and n.time_us is not None and (best is None or n.time_us < best.time_us):
            best = n
        curve.append(
            {"evaluations": count, "best_time_us": best.time_us if best else None, "at": n.finished_at}
        )
    rv = meta.get("reverified")
    base = root.time_us if root and root.status == "valid" else None
    ported = {"port": meta["port"], "source_parity": meta.get("source_parity")} if meta.get("port") else {}
    return {
        "run_dir": str(store.path.parent),
        "algorithm": (meta.get("settings") or {}).get("algorithm"),
        "task": meta.get("task"),
        "stopped": meta.get("stopped"),
        "nodes": len(nodes),
        "by_status": {s: sum(1 for n in nodes if n.status == s) for s in COLORS},
        "evaluations": sum(1 for n in nodes if n.finished and not n.cached),
        "cache_hits": sum(1 for n in nodes if n.cached),
        "cost_usd": store.total_cost_usd(),
        "root": _brief(root, base),
        "best": _brief(best, base),
        "reverified": rv,
        "not_valid": [why_not_valid(n) for n in nodes if n.status in ("invalid", "failed")],
        "time_label": best.time_label if best else None,
        "curve": curve,
        **ported,  # a PyTorch source: the port, its check, and the best kernel against the source
    }


def why_not_valid(n: Node) -> dict[str, Any]:
    """An invalid or failed node's reason: the stage it stopped at, the verdict kind, one line."""
    v = n.verdict
    stage = v.stopped_at if v else None
    report = (
        {"compile": v.compile, "validate": v.validation, "profile": v.profile}.get(stage or "") if v else None
    )
    failure = (report or {}).get("failure") or {}
    kind = failure.get("kind")
    line = failure.get("summary") or (v.failure if v else None) or "no reason recorded"
    if kind is None and v is not None and v.failure:
        head, _, rest = v.failure.partition(": ")
        kind, line = (head, rest or head) if head and " " not in head else ("evaluation_failed", v.failure)
    first = (str(line).strip().splitlines() or [""])[0].strip()
    return {
        "id": n.id,
        "status": n.status,
        "strategy": n.strategy,
        "stopped_at": stage,
        "kind": kind or "unknown",
        "reason": first[:240],
    }


def _brief(n: Node | None, base: float | None) -> dict[str, Any] | None:
    if n is None:
        return None
    return {
        "id": n.id,
        "status": n.status,
        "time_us": n.time_us,
        "time_label": n.time_label,
        "speedup_vs_root": (base / n.time_us) if base and n.time_us else None,
        "strategy": n.strategy,
        "config": n.config,
        "depth": n.depth,
        "numerics": ((n.verdict.validation or {}).get("error_summary") or "") if n.verdict else "",
    }


def _tree_svg(nodes: list[Node], base: float | None, best_id: str | None) -> str:
    by_depth: dict[int, list[Node]] = {}
    for n in sorted(nodes, key=lambda n: (n.depth, n.created_at, n.id)):
        by_depth.setdefault(n.depth, []).append(n)
    width = max(1, len(by_depth)) * 150 + 60
    height = max((len(v) for v in by_depth.values()), default=1) * 34 + 40
    pos = {n.id: (40 + d * 150, 30 + i * 34) for d, v in by_depth.items() for i, n in enumerate(v)}
    parts = [f'<svg id="tree" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for n in nodes:
        for pid in filter(None, (n.parent_id, n.second_parent_id)):
            if pid in pos:
                (x1, y1), (x2, y2) = pos[pid], pos[n.id]
                dash = ' stroke-dasharray="4 3"' if pid == n.second_parent_id else ""
                parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#bbb"{dash}/>')
    for n in nodes:
        x, y = pos[n.id]
        sp = base / n.time_us if base and n.time_us else None
        r = 6 + min(10, 4 * sp) if sp else 6
        label = f"{sp:.2f}x" if sp else (n.status if n.status != "valid" else "?")
        if n.time_label == "estimate" and sp:
            label += " est"
        ring = ' stroke="#000" stroke-width="3"' if n.id == best_id else ""
        why = why_not_valid(n) if n.status in ("invalid", "failed") else None
        reason = f" {why['kind']}: {why['reason']}" if why else ""
        tip = html.escape(
            f"{n.id} {n.strategy or 'root'} {n.status}{reason} {n.time_us or ''} {json.dumps(n.config)}"
        )
        parts.append(
            f'<g class="node" data-id="{n.id}"><title>{tip}</title><circle cx="{x}" cy="{y}" r="{r:.1f}" '
            f'fill="{COLORS[n.status]}"{ring}/><text x="{x + r + 4:.0f}" y="{y + 4}" font-size="11">'
            f"{html.escape(label)} {html.escape((n.strategy or 'root')[:14])}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _line_svg(points: list[tuple[float, float]], xlabel: str, ylabel: str, w: int = 520, h: int = 220) -> str:
    if not points:
        return f'<svg width="{w}" height="{h}"><text x="20" y="40">no data</text></svg>'
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = lambda x: 50 + (x - x0) / ((x1 - x0) or 1) * (w - 70)  # noqa: E731
    sy = lambda y: h - 30 - (y - y0) / ((y1 - y0) or 1) * (h - 50)  # noqa: E731
    path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">'
        f'<line x1="50" y1="{h - 30}" x2="{w - 20}" y2="{h - 30}" stroke="#333"/>'
        f'<line x1="50" y1="20" x2="50" y2="{h - 30}" stroke="#333"/>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{path}"/>'
        f'<text x="{w / 2}" y="{h - 8}" font-size="11">{html.escape(xlabel)}</text>'
        f'<text x="4" y="14" font-size="11">{html.escape(ylabel)}</text>'
        f'<text x="4" y="{sy(y0) + 4:.0f}" font-size="10">{y0:.3g}</text>'
        f'<text x="4" y="{sy(y1) + 4:.0f}" font-size="10">{y1:.3g}</text>'
        f'<text x="{w - 40}" y="{h - 16}" font-size="10">{x1:.3g}</text></svg>'
    )


def _port_section(s: dict[str, Any]) -> str:
    """A ported PyTorch source: which path made the port, its check, and the source-parity verdict."""
    port = s.get("port")
    if not port:
        return ""
    parity = s.get("source_parity") or {}
    verdict = parity.get("summary") or "not judged (the search did not finish)"
    mark = "not run" if not parity else "pass" if parity.get("ok") else "fail"
    return (
        f'<h2>PyTorch source</h2><p id="port">port of {html.escape(str(port.get("source")))} by '
        f"{html.escape(str(port.get('path')))}, check: <b>{html.escape(str(port.get('check')))}</b> "
        f"({html.escape(str(port.get('summary')))})</p>"
        f'<p id="source-parity">source parity: <b>{mark}</b>: '
        f"{html.escape(verdict)}</p>"
    )


def render_html(store: GraphStore) -> str:
    s = summary(store)
    nodes = store.nodes()
    base = (s["root"] or {}).get("time_us") if (s["root"] or {}).get("status") == "valid" else None
    best = s["best"]
    best_node = store.get(best["id"]) if best else None
    curve = [(c["evaluations"], c["best_time_us"]) for c in s["curve"] if c["best_time_us"] is not None]
    t0 = min((n.created_at for n in nodes), default=0.0)
    cost, spent = [], 0.0
    for n in sorted(nodes, key=lambda n: n.created_at):
        spent += n.cost_usd
        cost.append(((n.created_at - t0) / 60.0, spent))
    label = s["time_label"] or "time"
    evidence = ""
    if best_node is not None:
        v = best_node.verdict.model_dump(mode="json") if best_node.verdict else {}
        evidence = (
            f"<p>node <code>{best_node.id}</code>, strategy {html.escape(str(best_node.strategy))}, "
            f"time {best_node.time_us:.4g} us ({html.escape(str(best_node.time_label))})"
            + (f", {best['speedup_vs_root']:.2f}x over the root" if best.get("speedup_vs_root") else "")
            + "</p><h3>Re-verification (fresh evaluation, new seeds)</h3><pre>"
            + html.escape(
                json.dumps(s["reverified"], indent=1)[:6000] if s["reverified"] else "not re-verified"
            )
            + "</pre><details><summary>verdict</summary><pre>"
            + html.escape(json.dumps(v, indent=1)[:20000])
            + "</pre></details><h3>Source</h3><pre>"
            + html.escape(store.source(best_node.source_hash))
            + "</pre>"
        )
    rows = "".join(
        f"<tr><td><code>{html.escape(w['id'][:17])}</code></td><td>{html.escape(str(w['strategy'] or 'root'))}</td>"
        f"<td>{w['status']}</td><td>{html.escape(str(w['stopped_at'] or '-'))}</td>"
        f"<td><b>{html.escape(w['kind'])}</b></td><td>{html.escape(w['reason'])}</td></tr>"
        for w in s["not_valid"]
    )
    why_table = (
        '<h2>Why nodes are not valid</h2><table id="not-valid" border="1" cellpadding="4">'
        "<tr><th>node</th><th>strategy</th><th>status</th><th>stage</th><th>kind</th><th>reason</th></tr>"
        f"{rows}</table>"
        if rows
        else ""
    )
    legend = " ".join(f'<span style="color:{c}">&#9679; {k}</span>' for k, c in COLORS.items())
    data = html.escape(json.dumps({k: s[k] for k in ("nodes", "evaluations", "cache_hits", "by_status")}))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>maxkernel search report</title>
<style>body{{font-family:sans-serif;margin:16px}}pre{{background:#f6f6f6;padding:8px;overflow:auto;max-height:400px}}
.row{{display:flex;gap:24px;flex-wrap:wrap}}#tree-box{{overflow:auto;border:1px solid #ddd;max-height:520px}}</style>
</head><body><h1>Search: {html.escape(str(s["algorithm"]))} on {html.escape(str((s["task"] or {}).get("reference")))}</h1>
<p id="facts" data-summary="{data}">{s["nodes"]} nodes, {s["evaluations"]} evaluations, {s["cache_hits"]} cache hits,
${s["cost_usd"]:.4f} spent; stopped: {html.escape(str(s["stopped"]))}. Times are {html.escape(label)}s
{"(static estimates, not measurements)" if label == "estimate" else ""}.</p>
<h2>Search tree</h2><p>{legend}; label = speedup over the root (est = estimate).</p>
<div id="tree-box">{_tree_svg(nodes, base, best["id"] if best else None)}</div>
<div class="row"><div><h2>Best so far vs evaluations</h2>{_line_svg(curve, "evaluations", f"best {label} (us)")}</div>
<div><h2>Cost over time</h2>{_line_svg(cost, "minutes", "USD spent")}</div></div>
{why_table}
{_port_section(s)}
<h2>Best kernel</h2>{evidence or "<p>no valid kernel</p>"}
<script>for(const g of document.querySelectorAll('.node'))g.addEventListener('click',()=>{{
navigator.clipboard&&navigator.clipboard.writeText(g.dataset.id)}});</script>
</body></html>"""


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    store = GraphStore(run_dir, requeue=False)
    try:
        path = Path(out) if out else store.path.parent / "report.html"
        path.write_text(render_html(store), encoding="utf-8")
        return path
    finally:
        store.close()
