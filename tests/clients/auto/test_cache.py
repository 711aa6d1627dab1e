"""No repeated work (#13 item 6): a byte-identical kernel in the same Auto run is a cache hit.

Real verdicts from an in-memory server; the test counts the tool calls that reach it.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest_paths import PLUS_ONE_REF

from maxkernel.clients.auto.loop import AutoLoop
from maxkernel.clients.mcp_client import KernelServerClient
from maxkernel.clients.run_store import RunStore
from maxkernel.server.app import build_server
from maxkernel.tpu_tools.pool.workers import WorkerPool
from tests.clients.auto.test_loop import ANALYSIS, PLAN, PLUS_ONE, Script, code, config


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(max_workers=1) as p:
        yield p


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "references").mkdir(parents=True)
    shutil.copyfile(PLUS_ONE_REF, ws / "references" / "plus_one_reference.py")
    return ws


async def _run(pool, workspace, store, cfg, model, *, resume=False) -> tuple[dict, list[str]]:
    calls: list[str] = []
    async with KernelServerClient.in_memory(build_server(workspace, pool=pool)) as server:
        real_call = server.call

        async def counting(tool, arguments):
            calls.append(tool)
            return await real_call(tool, arguments)

        server.call = counting
        loop = (
            AutoLoop.resume(model, [server], store) if resume else AutoLoop.start(model, [server], store, cfg)
        )
        return await loop.run(), calls


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_the_same_kernel_twice_is_evaluated_once(pool, workspace, tmp_path):
    script = Script(
        planner=[PLAN, PLAN],
        implementer=[code(PLUS_ONE), code(PLUS_ONE)],  # iteration 2 proposes the byte-identical kernel
        profile_analyst=[ANALYSIS, ANALYSIS],
    )
    store = RunStore.create(tmp_path / "runs", "plus_one")
    cfg = config("plus_one_reference", iterations=2, target="cpu")
    summary, calls = await _run(pool, workspace, store, cfg, script.model)

    assert [it["verified"] for it in summary["iterations"]] == [True, True]
    # one compile, one validate, one profile reached the server; iteration 2 reused them
    assert calls.count("compile_kernel") == 1 and calls.count("validate_kernel") == 1, calls
    assert calls.count("profile_kernel") == 1, calls
    assert summary["cache_hits"] == 3
    second = json.loads((store.root / "iter-02" / "validate-0.json").read_text())
    assert second["ok"] and second["cache_hit"]["first"] == "validate in iteration 1"
    first = json.loads((store.root / "iter-01" / "validate-0.json").read_text())
    assert "cache_hit" not in first

    # a different kernel is not a hit: one byte changes the key
    other = PLUS_ONE.replace("+ 1.0", "+ 1.00")
    script2 = Script(planner=[PLAN], implementer=[code(other)], profile_analyst=[ANALYSIS])
    store2 = RunStore.create(tmp_path / "runs", "plus_one")
    summary2, calls2 = await _run(
        pool, workspace, store2, config("plus_one_reference", target="cpu"), script2.model
    )
    assert calls2.count("validate_kernel") == 1 and summary2["cache_hits"] == 0
    # each validation that reaches the server runs seeds it draws fresh (a cache hit keeps its verdict's)
    other_first = json.loads((store2.root / "iter-01" / "validate-0.json").read_text())
    assert first["seed_offset"] != other_first["seed_offset"], (
        "the Auto loop's seeds must be drawn, not fixed"
    )
    assert first["seeds"][0] == first["seed_offset"] and first["seed_offset"] != 0


def test_autotune_evaluates_a_kernel_two_configs_render_identically_once(pool, tmp_path):
    """A tunable the template never reads renders the same kernel twice: the second is a 'duplicate'."""
    from maxkernel.tpu_tools.cost.autotune import autotune
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    template = PLUS_ONE.replace("+ 1.0", "+ ${c}")
    report = autotune(
        Evaluator(pool, timeout_s=120),
        template,
        {"c": [1.0, 2.0], "unused": [1, 2]},
        "8p_GEMM",  # never loaded: `check` prunes every distinct render before any job runs
        "cpu",
        "small",
        max_configs=1,
        workdir=tmp_path / "at",
        check=lambda cfg: ["skip: this test only counts renders"],
    )
    reasons = [r.pruned_reason for r in report.configs]
    assert reasons.count("duplicate") == 2 and reasons.count("illegal") == 2, reasons
    dup = next(r for r in report.configs if r.pruned_reason == "duplicate")
    assert "same kernel as config" in dup.failure and dup.kernel_path is None
