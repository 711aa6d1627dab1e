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


def export_suite_configs(suite_dirs: list[str], out_dir: str, note: str = "") -> list[str]:
    """The winners of search-mode suites (re-verified, correct rows only) as per-chip JSON files.

    Read from each suite's own records, not the user's cache, so what ships is exactly what those
    suites found and ranked (each entry names its tier).
    """
    import tempfile
    from pathlib import Path

    from maxkernel.clients.search.store import GraphStore
    from maxkernel.clients.search.templates import space_for
    from maxkernel.clients.suite.runner import SuiteSettings
    from maxkernel.clients.suite.store import SuiteStore

    with tempfile.TemporaryDirectory() as tmp:
        cache = tuned_configs.TunedConfigCache(Path(tmp) / "c.sqlite", shipped_dir=None)
        for d in suite_dirs:
            store = SuiteStore(d, requeue=False)
            settings = SuiteSettings.model_validate(store.get_meta("settings"))
            chip = _chip(settings.target)
            for row in store.rows():
                space = space_for(row.task)
                if not row.correct or space is None or chip is None or settings.mode != "search":
                    continue
                graph = GraphStore(store.task_dir(row.task), requeue=False)
                rv = graph.get_meta("reverified")
                node = graph.get(rv["node_id"]) if rv else None
                graph.close()
                if node is None or not node.config or node.time_label not in ("measured", "estimate"):
                    continue
                cache.put(
                    tuned_configs.TunedConfig(
                        key=tuned_configs.make_key(chip, row.task, settings.size, template_text(space)),
                        config=node.config,
                        time_us=node.time_us,
                        tier=node.time_label,
                        found_by=f"suite --mode search ({settings.algorithm}, {settings.task_max_evaluations} evals)",
                        task=row.task,
                    )
                )
            store.close()
        paths = [str(p) for p in cache.export_json(out_dir, note=note)]
        cache.close()
    return paths


if (
    __name__ == "__main__"
):  # python -m maxkernel.clients.search.tuned OUT_DIR SUITE_DIR... (the shipped configs)
    import sys

    print(export_suite_configs(sys.argv[2:], sys.argv[1]))
