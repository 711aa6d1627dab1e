"""The Auto loop on a multi-chip task: the MESH reaches the model's task text and every verdict."""

from __future__ import annotations

import json

import pytest

from maxkernel.clients.auto.state import AutoConfig
from maxkernel.clients.run_store import RunStore
from maxkernel.jaxbench.registry import pallas_reference_path
from tests.clients.auto.test_loop import ANALYSIS, PLAN, Script, code, pool, run_loop

__all__ = ["pool"]  # the fixture shared with tests/clients/auto/test_loop.py


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_auto_loop_validates_a_ring_kernel_on_four_devices(pool, tmp_path):
    ring = pallas_reference_path("52m_Reduce_Scatter").read_text()
    script = Script(planner=[PLAN], implementer=[code(ring)], profile_analyst=[ANALYSIS])
    cfg = AutoConfig(task="52m", reference="52m", target="tpu-v6e", iterations=1, test_cases=0)
    store = RunStore.create(tmp_path / "runs", "52m")
    summary, _ = await run_loop(pool, tmp_path / "ws", store, cfg, script.model)
    it = summary["iterations"][0]
    assert [a["outcome"] for a in it["attempts"]] == ["verified"], it
    assert "multi-chip" in script.prompts[0] and '"mesh"' in script.prompts[0]  # the planner saw the MESH
    validations = [json.loads(p.read_text()) for p in (store.root / "iter-01").glob("validate-*.json")]
    assert validations and all(v["devices"] == 4 for v in validations)
    compiled = json.loads((store.root / "iter-01" / "compile-0.json").read_text())
    assert compiled["topology"] == "v6e:2x2"
