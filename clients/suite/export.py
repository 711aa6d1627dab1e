"""The winners of search-mode suites as the shipped per-chip tuned configs (tpu_tools/data/tuned_configs)."""

from __future__ import annotations

from maxkernel.clients.search.tuned import _chip, template_text
from maxkernel.tpu_tools.cost import tuned_configs


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
                if set(node.config) != set(space.initial):
                    continue  # searched in another space (a template since replaced): its key would lie
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
):  # python -m maxkernel.clients.suite.export OUT_DIR SUITE_DIR... (the shipped configs)
    import sys

    print(export_suite_configs(sys.argv[2:], sys.argv[1]))
