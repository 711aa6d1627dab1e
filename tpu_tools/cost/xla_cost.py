"""XLA's own cost analysis of a compiled program (flops, bytes accessed), read defensively."""

from __future__ import annotations


def cost_analysis_of(compiled) -> dict[str, float]:
    """XLA's cost analysis of a compiled executable, without the -1 placeholders TPU AOT reports."""
    try:
        cost = compiled.cost_analysis()
    except Exception:
        return {}
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    keys = ("flops", "bytes accessed", "transcendentals", "optimal_seconds")
    return {k: float(cost[k]) for k in keys if cost and k in cost and float(cost[k]) >= 0}
