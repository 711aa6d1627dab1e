"""The Auto loop's tester and autotuner steps against an in-memory server (scripted and offline models)."""

from __future__ import annotations

import json

import pytest
from conftest_paths import KERNELS

from maxkernel.clients.auto.loop import AutoConfig, AutoLoop
from maxkernel.clients.mcp_client import KernelServerClient
from maxkernel.clients.offline.model import OfflineModel
from maxkernel.clients.progress import NullReporter
from maxkernel.clients.run_store import RunStore
from maxkernel.server.app import build_server
from tests.clients.auto.test_loop import (
    ANALYSIS,
    PLAN,
    PLUS_ONE,
    Script,
    code,
    config,
    fix,
    pool,
    run_loop,
    workspace,
)

__all__ = ["pool", "workspace"]  # fixtures shared with tests/clients/auto/test_loop.py

CLIPPED = (KERNELS / "clipped_plus_one.py").read_text()


def cases(*items: dict) -> str:
    return "```json\n" + json.dumps({"cases": list(items)}) + "\n```"


BIG = {"name": "big_values", "distribution": "large_magnitude", "why": "clipping or overflow"}
NO_SUCH_DIM = {"name": "deep", "sizes": {"depth": 3}, "why": "a dimension the task does not have"}


class Notes(NullReporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_a_failing_case_takes_the_debug_path_and_an_unusable_case_is_skipped(pool, workspace, tmp_path):
    script = Script(
        planner=[PLAN],
        implementer=[code(CLIPPED)],
        tester=[cases(NO_SUCH_DIM, BIG)],
        debugger=[fix(PLUS_ONE, "drop the clip")],
        profile_analyst=[ANALYSIS],
    )
    store = RunStore.create(tmp_path / "runs", "plus_one")
    notes = Notes()
    async with KernelServerClient.in_memory(build_server(workspace, pool=pool)) as server:
        loop = AutoLoop.start(
            script.model,
            [server],
            store,
            config("plus_one_reference", target="cpu", seeds=1, test_cases=3),
            reporter=notes,
        )
        summary = await loop.run()

    assert script.asked == ["planner", "implementer", "tester", "debugger", "profile_analyst"]
    it = summary["iterations"][0]
    assert [a["origin"] for a in it["attempts"]] == ["implementer", "debugger"]
    assert [a["outcome"] for a in it["attempts"]] == ["test_failed", "verified"]
    assert "extra test case 'big_values' failed" in it["attempts"][0]["error"]
    debug_prompt = script.prompts[3]
    assert "big_values" in debug_prompt and "large_magnitude" in debug_prompt
    assert it["tests"] == [
        {"attempt": 0, "cases": {"deep": "unusable", "big_values": "failed"}},
        # no size case is added: validate itself runs every kernel at small and the derived size
        {"attempt": 1, "cases": {"deep": "unusable", "big_values": "passed"}},
    ]
    assert any("'deep' is unusable, skipped" in n and "depth" in n for n in notes.notes)
    tests = json.loads((store.root / "iter-01" / "tests.json").read_text())
    assert tests[0]["results"][0]["status"] == "unusable"
    assert tests[1]["results"][1]["report"]["case"]["distribution"] == "large_magnitude"
    assert summary["best"]["iteration"] == 1 and (store.root / "best_kernel.py").read_text() == PLUS_ONE


# Written for the small size only: its out_shape is the small size's, whatever it is given.
SMALL_ONLY = PLUS_ONE.replace(
    "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
    "out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype))(x[:16, :128])",
)
# Right at the small size, zeros of the right shape above it: the case the larger size is there for.
ZEROS_ABOVE = PLUS_ONE.replace(
    "    return pl.pallas_call(",
    "    if x.shape != (16, 128):\n        return jax.numpy.zeros_like(x)\n    return pl.pallas_call(",
)


@pytest.mark.anyio
@pytest.mark.parametrize("kernel", [SMALL_ONLY, ZEROS_ABOVE])
async def test_a_shape_specialized_kernel_fails_validation_with_its_sizes(pool, workspace, tmp_path, kernel):
    """No `refused` escape: written for the small shape (loudly or with zeros above it), it fails
    validation as shape_specialized and never becomes the best kernel."""
    assert kernel != PLUS_ONE
    script = Script(planner=[PLAN], implementer=[code(kernel)], debugger=[fix(kernel, "-")])
    cfg = config("plus_one_reference", target="cpu", seeds=1, profile=False, test_cases=0, max_debug=0)
    summary, _ = await run_loop(pool, workspace, RunStore.create(tmp_path / "runs", "p"), cfg, script.model)
    it = summary["iterations"][0]
    assert it["attempts"][0]["outcome"] == "validation_failed"
    assert (
        "shape_specialized" in it["attempts"][0]["error"]
        or "written for one shape" in it["attempts"][0]["error"]
    )
    assert summary["best"] is None


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_resume_after_the_test_step_does_not_ask_the_tester_again(pool, workspace, tmp_path):
    first = Script(planner=[PLAN], implementer=[code(PLUS_ONE)], tester=[cases(BIG)])
    store = RunStore.create(tmp_path / "runs", "plus_one")
    cfg = config("plus_one_reference", target="cpu", seeds=1, iterations=2, profile=False, test_cases=1)
    summary, _ = await run_loop(pool, workspace, store, cfg, first.model, max_steps=5)
    assert first.asked == ["planner", "implementer", "tester"]
    assert json.loads((store.root / "state.json").read_text())["steps"][-1] == "1:test"

    second = Script(planner=[PLAN], implementer=[code(PLUS_ONE)])  # no tester replies: asking would fail
    summary, loop = await run_loop(
        pool, workspace, RunStore.open(store.root), None, second.model, resume=True
    )
    assert second.asked == ["planner", "implementer"]
    assert loop.state.steps.count("2:test") == 1  # iteration 2 ran the cached case
    assert [it["tests"][0]["cases"] for it in summary["iterations"]] == [{"big_values": "passed"}] * 2
    assert summary["stop_reason"] == "completed 2 iteration(s)"


@pytest.mark.anyio
@pytest.mark.slow  # a real sweep at the production size: minutes
async def test_autotune_with_the_offline_model_on_rmsnorm(pool, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    store = RunStore.create(tmp_path / "runs", "12p_RMSNorm")
    cfg = AutoConfig(
        task="12p_RMSNorm",
        reference="12p_RMSNorm",
        target="tpu-v6e",
        size="small",
        iterations=1,
        seeds=1,
        test_cases=0,
        autotune=True,
        autotune_max_configs=2,
    )
    summary, loop = await run_loop(pool, ws, store, cfg, OfflineModel())

    it = summary["iterations"][0]
    tuned = it["autotune"]
    assert tuned is not None and tuned["basis"] == "estimate", tuned
    baseline = tuned["baseline_time_us"]
    assert tuned["best_time_us"] is not None and tuned["best_time_us"] <= baseline
    assert summary["best"]["time_us"] <= baseline
    record = json.loads((store.root / "iter-01" / "autotune.json").read_text())
    assert record["report"]["best"]["status"] == "valid" and record["space"]["tunables"]
    if tuned["beats_current"]:  # the rendered config ran the normal path as one more attempt
        assert it["attempts"][-1]["origin"] == "autotuner"
        assert (store.root / "iter-01" / f"profile-{it['attempts'][-1]['n']}.json").is_file()
    assert "1:autotune" in loop.state.steps
