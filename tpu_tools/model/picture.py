"""The hotspot table as a page a person would rather look at than read: one bar per region, the suite's style."""

from __future__ import annotations

import html

from maxkernel.tpu_tools.model.hotspots import HotspotReport

_COLORS = {"compute": "#2e7dd1", "memory": "#e08a1e", "overhead": "#999", "none": "#ccc"}


def _bar(share: float, roof_share: float, bound: str, width: int = 420) -> str:
    """The region's share of the step, and (thin, dark) the share its roofline would take."""
    w = max(1.5, share * (width - 60))
    r = max(1.0, roof_share * (width - 60))
    return (
        f'<svg width="{width}" height="20" xmlns="http://www.w3.org/2000/svg">'
        f'<rect x="0" y="2" width="{w:.1f}" height="12" fill="{_COLORS.get(bound, "#ccc")}"/>'
        f'<rect x="0" y="15" width="{r:.1f}" height="3" fill="#333"/>'
        f'<text x="{w + 4:.0f}" y="12" font-size="10">{100 * share:.1f}%</text></svg>'
    )


def render_html(r: HotspotReport) -> str:
    e = html.escape
    rows = []
    for c in r.regions:
        g = c.region
        roof_share = c.roofline_us * g.count / r.step_us if r.step_us else 0.0
        rows.append(
            f"<tr><td><b>{e(g.id)}</b><br><span class=note>{e(g.kind)}, {e(g.boundary)}</span></td>"
            f"<td>×{g.count}</td><td>{c.time_us:.4g}</td><td>{c.total_us:.4g}</td>"
            f"<td>{_bar(c.share, roof_share, c.bound)}</td><td>{e(c.bound)}</td><td>{c.headroom:.2f}x</td>"
            f"<td>{c.flops / 1e9:.3g}</td><td>{c.hbm_bytes / 2**20:.4g}</td>"
            f"<td class=note>{e(', '.join(g.origin[:3]))}</td></tr>"
        )
    notes = "".join(f"<li>{e(n)}</li>" for n in [r.sum_note, *r.notes])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>maxkernel hotspots: {e(r.model)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; }}
table {{ border-collapse: collapse; }} td, th {{ border-bottom: 1px solid #ddd; padding: 3px 8px; font-size: 13px; }}
.est {{ background: #fff3cd; padding: 1px 4px; }} .note {{ color: #666; max-width: 260px; font-size: 11px; }}
</style></head><body>
<h1>maxkernel hotspots: {e(r.model)} on {e(r.target)} ({e(r.size)})</h1>
<p><span class="est">estimate</span> ({e(r.tier)}): the whole step {r.step_us:.4g} µs, compiled for {e(r.target)} without a
chip in {r.compile_time_ms / 1e3:.1f} s (analysis {r.analysis_time_ms / 1e3:.1f} s). Nothing ran: these are the static
model's numbers, not measurements. Bars: each region's share of the step (blue compute-bound, orange memory-bound);
the thin dark bar is the share its roofline would take (its flops at peak or its inputs and outputs once through HBM).</p>
<ul>{notes}</ul>
<table><tr><th>region</th><th>count</th><th>µs each</th><th>µs total</th><th>share of the step</th><th>bound</th>
<th>headroom</th><th>GFLOP each</th><th>HBM MiB each</th><th>origin</th></tr>
{"".join(rows)}
</table>
<p class=note>inputs: {e(", ".join(r.shapes))}</p>
</body></html>
"""
