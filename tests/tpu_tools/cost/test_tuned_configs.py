"""The tuned-config cache: exact keys only, the better entry kept, JSON per chip, shipped configs, and the
hit path (a search and a suite start from the cached best and say so)."""

from __future__ import annotations

import asyncio
import json

import pytest

from maxkernel.tpu_tools.cost import tuned_configs as tc


def entry(key, config, time_us, tier="estimate", by="test"):
    return tc.TunedConfig(key=key, config=config, time_us=time_us, tier=tier, found_by=by)


def test_only_the_exact_key_matches_and_the_better_entry_is_kept(tmp_path):
    cache = tc.TunedConfigCache(tmp_path / "c.sqlite", shipped_dir=None)
    key = tc.make_key("tpu-v6e", "8p", "small", "template A")
    assert key.problem.startswith("8p_GEMM|small|") and "bfloat16" in key.problem
    assert cache.put(entry(key, {"block_m": 128}, 50.0))
    assert not cache.put(entry(key, {"block_m": 64}, 80.0))  # slower, same tier: not kept
    assert cache.put(entry(key, {"block_m": 256}, 90.0, tier="measured"))  # a measurement beats estimates
    assert cache.get(key).config == {"block_m": 256}
    for other in (
        key.model_copy(update={"chip": "tpu-v5e"}),
        tc.make_key("tpu-v6e", "8p", "full", "template A"),  # another shape
        tc.make_key("tpu-v6e", "8p", "small", "template B"),  # another template
        key.model_copy(update={"jax_version": "0.0.1"}),
        key.model_copy(update={"libtpu_version": "0.0.1"}),
    ):
        assert cache.get(other) is None


def test_export_one_file_per_chip_then_import(tmp_path):
    cache = tc.TunedConfigCache(tmp_path / "a.sqlite", shipped_dir=None)
    k6, k5 = tc.make_key("tpu-v6e", "12p", "small", "t"), tc.make_key("tpu-v5e", "12p", "small", "t")
    cache.put(entry(k6, {"block_rows": 64}, 3.0))
    cache.put(entry(k5, {"block_rows": 32}, 5.0))
    paths = cache.export_json(tmp_path / "out")
    assert sorted(p.name for p in paths) == ["tpu-v5e.json", "tpu-v6e.json"]
    assert json.loads(paths[1].read_text())["entries"][0]["tier"] == "estimate"
    other = tc.TunedConfigCache(tmp_path / "b.sqlite", shipped_dir=None)
    assert other.import_json(tmp_path / "out" / "tpu-v6e.json") == 1
    assert other.get(k6).config == {"block_rows": 64} and other.get(k5) is None
    with pytest.raises(ValueError, match="not a tuned-config file"):
        other.import_json(tmp_path / "a.sqlite")


def test_shipped_configs_answer_when_the_users_cache_is_empty(tmp_path):
    ship = tmp_path / "ship"
    key = tc.make_key("tpu-v6e", "8p", "small", "t")
    src = tc.TunedConfigCache(tmp_path / "src.sqlite", shipped_dir=None)
    src.put(entry(key, {"block_m": 512}, 7.0, by="suite"))
    src.export_json(ship)
    cache = tc.TunedConfigCache(tmp_path / "user.sqlite", shipped_dir=ship)
    assert cache.get(key).found_by == "suite" and cache.entries() == []


def test_shipped_files_parse_and_name_their_tier():
    files = sorted(tc.SHIPPED_DIR.glob("*.json"))
    assert {p.stem for p in files} >= {"tpu-v5e", "tpu-v6e"}
    for p in files:
        entries = tc.load_json(p)
        assert entries and all(e.key.chip == p.stem and e.tier in ("measured", "estimate") for e in entries)


def test_search_and_suite_start_from_the_cached_best_and_say_so(tmp_path, capsys):
    """The hit path: seed the cache with a non-initial config of 8p's space; the search's root is it."""
    import argparse

    from suite_fakes import ScriptedServer, suite_args

    from maxkernel.clients.search.cli import make_proposer
    from maxkernel.clients.search.templates import space_for
    from maxkernel.clients.search.tuned import record_best
    from maxkernel.clients.suite.cli import run_suite

    space = space_for("8p_GEMM")
    other = next(c for c in space.configs() if c != space.initial)
    assert record_best(space, "tpu-v6e", "8p_GEMM", "small", other, 1.0, "estimate", "test")
    ns = argparse.Namespace(proposer=None, model="offline", target="tpu-v6e", size="small", root=None)
    proposer = make_proposer(ns, "8p_GEMM", None, None)
    assert proposer.initial == other
    assert "starting from the cached best config" in capsys.readouterr().err
    ns.target = "tpu-v5p"  # another chip, nothing cached or shipped for it: the space's own start
    assert make_proposer(ns, "8p_GEMM", None, None).initial == space.initial
    ns.target, ns.size = "tpu-v6e", "full"  # the configs this package ships (found at full) answer when
    # the user's cache has none for that shape
    shipped = next(e for e in tc.load_json(tc.SHIPPED_DIR / "tpu-v6e.json") if e.task == "8p_GEMM")
    same_versions = (shipped.key.jax_version, shipped.key.libtpu_version) == tc.versions()
    expected = shipped.config if same_versions else space.initial  # other jax/libtpu: not offered
    assert make_proposer(ns, "8p_GEMM", None, None).initial == expected

    # the suite tunes at the production size: the cache is keyed by the target shapes, so seed it there
    assert record_best(space, "tpu-v6e", "8p_GEMM", "full", other, 1.0, "estimate", "test")
    out = asyncio.run(run_suite(suite_args(str(tmp_path / "s"), tasks="8p"), servers=[ScriptedServer()]))
    from maxkernel.clients.search.store import GraphStore

    store = GraphStore(tmp_path / "s" / "tasks" / "8p_GEMM")
    assert store.get(store.get_meta("root")).config == other
    assert out["rows"][0]["correct"]


@pytest.mark.slow
def test_autotune_compiles_the_cached_best_first_and_says_so(tmp_path, monkeypatch):
    from maxkernel.tpu_tools.cost.autotune import autotune
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool
    from tests.tpu_tools.cost.test_autotune import SOURCE

    monkeypatch.setenv("MAXKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    cached = {"bm": 128, "bn": 128, "bk": 256}  # valid, but not the estimate's first choice (256x896)
    assert tc.record(
        "tpu-v6e", "8p_GEMM", "small", SOURCE, cached, time_us=1.0, tier="measured", found_by="x"
    )
    space = {"bm": [128, 256], "bn": [128, 896], "bk": [256]}
    with WorkerPool(max_workers=1) as pool:
        report = autotune(
            Evaluator(pool, timeout_s=240),
            SOURCE,
            space,
            "8p_GEMM",
            "tpu-v6e",
            "small",
            max_configs=1,
            workdir=tmp_path,
        )
    compiled = [r.config for r in report.configs if r.compile_ok is not None]
    assert compiled == [cached]
    assert any("started from the cached best" in n and "measured" in n for n in report.notes)
    # its own winner (ranked by the estimate) does not displace the measured entry
    assert tc.lookup("tpu-v6e", "8p_GEMM", "small", SOURCE).config == cached


def test_the_shipped_files_are_exported_from_a_search_suites_own_records(tmp_path):
    from suite_fakes import ScriptedServer, suite_args

    from maxkernel.clients.search.store import GraphStore
    from maxkernel.clients.suite.cli import run_suite
    from maxkernel.clients.suite.export import export_suite_configs

    asyncio.run(run_suite(suite_args(str(tmp_path / "s"), tasks="8p,12p"), servers=[ScriptedServer()]))
    (path,) = export_suite_configs([str(tmp_path / "s")], str(tmp_path / "out"), note="test")
    entries = {e.task: e for e in tc.load_json(tmp_path / "out" / "tpu-v6e.json")}
    assert path.endswith("tpu-v6e.json") and set(entries) == {"8p_GEMM", "12p_RMSNorm"}
    graph = GraphStore(tmp_path / "s" / "tasks" / "8p_GEMM", requeue=False)
    winner = graph.get(graph.get_meta("reverified")["node_id"])
    assert entries["8p_GEMM"].config == winner.config and entries["8p_GEMM"].tier == "estimate"
    assert "suite --mode search" in entries["8p_GEMM"].found_by
