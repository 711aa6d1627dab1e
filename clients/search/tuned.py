"""The search's door to the tuned-config cache: start from the cached best config, record the winner.

A TemplateSpace has no template text of its own (its `render` is a function), so its template hash
is the hash of its rendered initial config: any edit to the template or to its starting point is
another key, and a stale config is never offered.
"""

from __future__ import annotations

from typing import Any

from maxkernel.tpu_tools.cost import tuned_configs


def _chip(target: str) -> str | None:
    from maxkernel.tpu_tools.hardware.targets import parse_target

    try:
        tgt = parse_target(target)
    except Exception:
        return None
    return tgt.chip.name if tgt.chip is not None else None


def template_text(space: Any) -> str:
    return space.render(space.initial)


def cached_initial(space: Any, target: str, reference: str, size: str) -> tuple[dict | None, str]:
    """(the cached best config for this exact key, a line saying so) or (None, why not)."""
    chip = _chip(target)
    if chip is None:
        return None, f"no tuned-config cache for target {target} (not a TPU chip)"
    hit = tuned_configs.lookup(chip, reference, size, template_text(space))
    if hit is None:
        return None, f"tuned-config cache: no entry for {reference} {size} on {chip}"
    if set(hit.config) != set(space.space) or not space.allowed(hit.config):
        return None, f"tuned-config cache: the entry for {reference} on {chip} does not fit this space"
    return dict(hit.config), (
        f"starting from the cached best config {hit.config} for {chip} ({hit.tier}, found by {hit.found_by})"
    )


def record_best(
    space: Any,
    target: str,
    reference: str,
    size: str,
    config: dict,
    time_us: float | None,
    tier: str | None,
    by: str,
) -> bool:
    chip = _chip(target)
    if chip is None or tier not in ("measured", "estimate") or not config:
        return False
    return tuned_configs.record(
        chip, reference, size, template_text(space), config, time_us=time_us, tier=tier, found_by=by
    )
