"""Graph search: ids, store, cache, the three algorithms on a scripted objective, report and CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.clients.search.test_procs import FormulaEvaluator, make_search


def run(coro):
    return asyncio.run(coro)


def test_node_ids_are_content_addressed_and_migrations_recorded(tmp_path):
    from maxkernel.clients.search.graph import make_node, node_id, source_hash
    from maxkernel.clients.search.store import GraphStore

    root = make_node("def workload(x): return x")
    child = make_node("def workload(x): return x + 0", root, strategy="tiling")
    assert root.id == node_id(source_hash("def workload(x): return x"), None) and root.id.startswith("mkn1-")
    assert child.id != make_node("def workload(x): return x + 0").id  # the parent is part of the id
    store = GraphStore(tmp_path)
    store.add(root, "def workload(x): return x")
    assert store.add(root, "def workload(x): return x")[1] is False
    assert [r[0] for r in store.db.execute("SELECT name FROM _migrations")] == ["m001_initial"]
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("algorithm", ["parallel", "beam", "evolve"])
def test_each_algorithm_runs_to_completion_with_two_workers(tmp_path, algorithm):
    a, b = FormulaEvaluator("w1", 0.005), FormulaEvaluator("w2", 0.005)
    store, search = make_search(tmp_path, [a, b], algorithm=algorithm, max_evaluations=24)
    result = run(search.run())
    assert result.best is not None and result.best.status == "valid"
    assert result.reverified and result.reverified["holds"]
    assert a.calls and b.calls  # work was spread over both workers
    root = store.get(store.get_meta("root"))
    assert result.best.time_us < root.time_us
    assert not store.nodes("running")


def test_beam_never_admits_an_invalid_node(tmp_path):
    ev = FormulaEvaluator(invalid=lambda c: c["grid_order"] == "nmk" or c["block_k"] == 256)
    store, search = make_search(tmp_path, [ev], algorithm="beam", max_evaluations=40)
    run(search.run())
    admitted = [nid for e in store.events() if e["kind"] == "beam" for nid in e["data"]["admitted"]]
    assert admitted
    assert all(store.get(nid).status == "valid" for nid in admitted)
    assert store.nodes("invalid"), "the formula makes some configs invalid: the search must have met one"


def test_cache_prevents_reevaluating_a_duplicate_kernel(tmp_path):
    from maxkernel.clients.fleet.servers import Dispatcher
    from maxkernel.clients.search.evaluator import CachedEvaluator, EvalTask
    from maxkernel.clients.search.store import EvalCache
    from maxkernel.clients.search.templates import GEMM

    ev = FormulaEvaluator(delay_s=0.01)
    cache = EvalCache(tmp_path / "cache.sqlite")
    cached = CachedEvaluator(Dispatcher([ev], 2), cache, "ref")
    src, task = GEMM.render(GEMM.initial), EvalTask(reference="8p_GEMM")

    async def twice():
        return await asyncio.gather(cached.evaluate(src, task), cached.evaluate(src, task))

    (v1, c1), (v2, c2) = run(twice())  # concurrently: the second waits for the first
    assert len(ev.calls) == 1 and v1 == v2 and sorted([c1, c2]) == [False, True]
    # a second run sharing the cache file evaluates nothing it already knows
    store, search = make_search(tmp_path / "r1", [ev], algorithm="beam", max_evaluations=10, cache=cache)
    run(search.run())
    first = {n.source_hash for n in store.nodes() if n.finished}
    ev2 = FormulaEvaluator()
    store2, search2 = make_search(
        tmp_path / "r2",
        [ev2],
        algorithm="beam",
        max_evaluations=10,
        cache=EvalCache(tmp_path / "cache.sqlite"),
        reverify=0,
    )
    run(search2.run())
    from maxkernel.clients.search.graph import source_hash

    assert len(first) > 1 and not first & {source_hash(s) for s in ev2.calls}
    assert all(n.cached for n in store2.nodes() if n.finished and n.source_hash in first)


def _search_run(tmp_path) -> Path:
    store, search = make_search(
        tmp_path / "run", [FormulaEvaluator()], algorithm="evolve", max_evaluations=20
    )
    run(search.run())
    store.close()
    return tmp_path / "run"


def test_report_html_and_json(tmp_path, capsys):
    from maxkernel.clients.search.cli import main

    rd = _search_run(tmp_path)
    assert main(["report", str(rd), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["best"]["time_label"] == "estimate" and s["evaluations"] >= 1 and s["reverified"]["holds"]
    assert s["curve"][-1]["best_time_us"] == s["best"]["time_us"]
    assert main(["report", str(rd)]) == 0
    page = (rd / "report.html").read_text()
    assert "<svg" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert s["best"]["id"] in page and "estimate" in page
    assert main(["report", str(tmp_path / "nope")]) == 2


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no chromium")
def test_report_renders_in_headless_chromium(tmp_path):
    from maxkernel.clients.search.report import write_report

    page = write_report(_search_run(tmp_path))
    png = tmp_path / "out.png"
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--screenshot={png}",
            "--window-size=1200,900",
            page.as_uri(),
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses to a few KB


def test_cli_search_with_estimate_objective_end_to_end(tmp_path, capsys):
    from maxkernel.clients.search.cli import main

    rd = tmp_path / "run"
    code = main(
        [
            "search",
            "12p_RMSNorm",
            "--objective",
            "estimate",
            "--algorithm",
            "beam",
            "--run-dir",
            str(rd),
            "--max-evaluations",
            "6",
            "--cache",
            str(tmp_path / "c.sqlite"),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["best"]["time_label"] == "estimate" and out["evaluations"] <= 6
    assert main(["search", "--resume", str(rd), "--objective", "estimate", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["evaluations"] == out["evaluations"]  # nothing repeated


@pytest.mark.slow
def test_mcp_evaluator_over_in_memory_server(tmp_path):
    from maxkernel.clients.search.evaluator import EvalTask
    from maxkernel.clients.search.remote import MCPEvaluator
    from maxkernel.clients.search.templates import GEMM
    from maxkernel.server.app import build_server

    async def go():
        async with MCPEvaluator(build_server(tmp_path, max_workers=1), name="mem") as ev:
            return await ev.evaluate(
                GEMM.render(GEMM.initial), EvalTask(reference="8p_GEMM", seeds=1, profile_target="tpu-v6e")
            )

    v = run(go())
    assert v.status == "valid", v.failure
    assert v.time_label == "estimate" and v.time_us and v.compile and v.validation
