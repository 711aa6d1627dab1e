"""The Auto loop against an in-memory maxkernel server, driven by scripted models (no network).

Real verdicts: every compile/validate/profile goes through the server's tools on small inputs.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest_paths import KERNELS, MATMUL_REF, PLUS_ONE_REF

from maxkernel.clients.auto.loop import AutoConfig, AutoLoop
from maxkernel.clients.mcp_client import KernelServerClient
from maxkernel.clients.models import Budget, FunctionModel
from maxkernel.clients.run_store import RunStore
from maxkernel.server.app import build_server
from maxkernel.subagents import get_role
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.profile.scoreboard import profile_vs_xla

GOOD_MATMUL = (
    KERNELS / "_matmul_base.py"
).read_text() + "\n\ndef workload(a, b):\n    return tiled_matmul(a, b)\n"
BROKEN_MATMUL = GOOD_MATMUL.replace("return tiled_matmul(a, b)", "return tiled_matmull(a, b)")  # NameError
PLUS_ONE = """\
import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def workload(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""
BROKEN_PLUS_ONE = PLUS_ONE.replace("x_ref[...] + 1.0", "x_ref[...] + one")

PLAN = """Tiles of 128 fit VMEM easily.
```json
{"strategy": "128x128 tiles, f32 accumulator in VMEM", "block_sizes": {"block_m": 128, "block_k": 128,
 "block_n": 128}, "grid_order": ["m", "n", "k"], "dimension_semantics": ["parallel", "parallel", "arbitrary"],
 "expected_bound": "compute", "rationale": "small problem"}
```"""
ANALYSIS = '```json\n{"bottleneck": "overhead", "evidence": ["tiny grid"], "next_move": "larger blocks"}\n```'


def code(source: str) -> str:
    return f'Here it is.\n```python\n{source}```\n```json\n{{"notes": ""}}\n```'


def fix(source: str, summary: str) -> str:
    return (
        f"```python\n{source}```\n```json\n"
        + json.dumps({"cause": "a typo", "error_class": "python_error", "fix_summary": summary})
        + "\n```"
    )


def role_of(messages) -> str:
    system = messages[0].text
    return next(
        name
        for name in ("planner", "implementer", "debugger", "profile_analyst", "tester", "autotuner")
        if get_role(name).system_prompt == system
    )


class Script:
    """A scripted model: per role, a list of replies consumed in order; records the roles asked."""

    def __init__(self, **replies: list[str]) -> None:
        self.replies = {k: list(v) for k, v in replies.items()}
        self.asked: list[str] = []
        self.prompts: list[str] = []
        self.model = FunctionModel(self, name="scripted")

    def __call__(self, messages, settings) -> str:
        role = role_of(messages)
        self.asked.append(role)
        self.prompts.append(messages[-1].text)
        return self.replies[role].pop(0)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(max_workers=2) as p:
        yield p


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "references").mkdir(parents=True)
    shutil.copyfile(MATMUL_REF, ws / "references" / "matmul_reference.py")
    shutil.copyfile(PLUS_ONE_REF, ws / "references" / "plus_one_reference.py")
    return ws


def config(reference: str, **kw) -> AutoConfig:
    kw.setdefault("iterations", 1)
    kw.setdefault("test_cases", 0)  # the tester's extra cases: tests/clients/auto/test_roles.py
    return AutoConfig(
        task=reference, reference=f"references/{reference}.py", task_spec="match the reference", **kw
    )


async def run_loop(
    pool, workspace, store, cfg, model, *, resume=False, max_steps=None
) -> tuple[dict, AutoLoop]:
    async with KernelServerClient.in_memory(build_server(workspace, pool=pool)) as server:
        if resume:
            loop = AutoLoop.resume(model, [server], store)
        else:
            loop = AutoLoop.start(model, [server], store, cfg)
        return await loop.run(max_steps=max_steps), loop


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_debug_path_then_best_kernel_on_tpu_target(pool, workspace, tmp_path):
    script = Script(
        planner=[PLAN],
        implementer=[code(BROKEN_MATMUL)],
        debugger=[fix(GOOD_MATMUL, "rename tiled_matmull to tiled_matmul")],
        profile_analyst=[ANALYSIS],
    )
    store = RunStore.create(tmp_path / "runs", "matmul")
    summary, loop = await run_loop(
        pool, workspace, store, config("matmul_reference", target="tpu-v6e"), script.model
    )

    assert script.asked == ["planner", "implementer", "debugger", "profile_analyst"]
    it = summary["iterations"][0]
    assert [a["outcome"] for a in it["attempts"]] == ["compile_failed", "verified"]
    assert summary["best"]["iteration"] == 1
    assert summary["best"]["time_basis"] == "estimate"  # no v6e here: the labeled static estimate ranks it
    assert "estimate" in summary["best"]["why_best"]
    # the default size: compiled and estimated at the production size, validated at both check sizes
    assert summary["best"]["target_size"] == "full" and summary["best"]["validated_at"] == [
        "small",
        "derived",
    ]
    profile = json.loads((store.root / "iter-01" / "profile.json").read_text())
    assert profile["size"] == "full" and profile["nothing_measured"] and profile["measured"] == {}
    # The summary's last line: the kernel beside the reference's XLA program from this very profile.
    vs = profile_vs_xla(profile, "tpu-v6e")
    assert vs is not None and summary["best"]["vs_xla_line"] == vs.line()
    assert (store.root / "best_kernel.py").read_text() == GOOD_MATMUL
    assert "tiled_matmull" in script.prompts[2]  # the debugger saw the failing kernel and its error
    run = store.root / "iter-01"
    for name in (
        "plan.json",
        "kernel-0.py",
        "kernel-1.py",
        "compile-0.json",
        "compile-1.json",
        "validate-1.json",
        "profile.json",
        "analysis.json",
        "cost.json",
    ):
        assert (run / name).is_file(), name
    assert json.loads((run / "compile-0.json").read_text())["failure"]["kind"] in (
        "python_error",
        "load_error",
    )
    assert len(list(run.glob("transcript-*.json"))) == 4
    assert json.loads((store.root / "ledger.json").read_text())["entries"][0]["role"] == "planner"
    assert json.loads((store.root / "summary.json").read_text())["stop_reason"] == "completed 1 iteration(s)"


@pytest.mark.slow  # a whole Auto loop through its debug bound (~13 s): make test-slow
@pytest.mark.anyio
async def test_wrong_kernels_end_after_the_debug_bound(pool, workspace, tmp_path):
    other_broken = BROKEN_PLUS_ONE.replace("+ one", "+ uno")
    script = Script(
        planner=[PLAN],
        implementer=[code(BROKEN_PLUS_ONE)],
        debugger=[
            fix(other_broken, "use uno"),
            fix(other_broken, "use uno again"),
            fix(BROKEN_PLUS_ONE, "x"),
        ],
    )
    store = RunStore.create(tmp_path / "runs", "plus_one")
    cfg = config("plus_one_reference", target="cpu", max_debug=2)
    summary, _ = await run_loop(pool, workspace, store, cfg, script.model)

    assert summary["best"] is None
    it = summary["iterations"][0]
    assert [a["outcome"] for a in it["attempts"]] == [
        "compile_failed",
        "compile_failed",
        "duplicate_rejected",
    ]
    assert "--max-debug 2" in it["outcome"]
    assert sorted(p.name for p in (store.root / "iter-01").glob("compile-*.json")) == [
        "compile-0.json",
        "compile-1.json",
    ]
    assert "use uno" in script.prompts[3]  # the second debug prompt lists the failed fix
    assert summary["stop_reason"] == "completed 1 iteration(s)"


@pytest.mark.anyio
async def test_budget_exhaustion_stops_cleanly(pool, workspace, tmp_path):
    script = Script(planner=[PLAN], implementer=[code(PLUS_ONE)])
    store = RunStore.create(tmp_path / "runs", "plus_one")
    cfg = config("plus_one_reference", target="cpu", iterations=3, budget=Budget(max_tokens=10))
    summary, _ = await run_loop(pool, workspace, store, cfg, script.model)

    assert script.asked == ["planner"]
    assert summary["stop_reason"].startswith("budget exhausted: budget max_tokens=10")
    assert summary["best"] is None and summary["spend"]["calls"] == 1
    state = json.loads((store.root / "state.json").read_text())
    assert state["next_step"] == "implement" and state["steps"] == ["1:plan"]


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.anyio
async def test_resume_continues_from_the_last_finished_step(pool, workspace, tmp_path):
    first = Script(
        planner=[PLAN], implementer=[code(BROKEN_PLUS_ONE)], debugger=[fix(PLUS_ONE, "define one")]
    )
    store = RunStore.create(tmp_path / "runs", "plus_one")
    cfg = config("plus_one_reference", target="cpu")
    # plan, implement, compile (a NameError: a kind that can depend on the shape), validate (fails at every
    # size: a compile failure, not a shape's), debug
    summary, _ = await run_loop(pool, workspace, store, cfg, first.model, max_steps=5)
    assert summary["stop_reason"].startswith("interrupted after 5 steps")
    assert first.asked == ["planner", "implementer", "debugger"]

    second = Script(profile_analyst=[ANALYSIS])
    summary, loop = await run_loop(
        pool, workspace, RunStore.open(store.root), None, second.model, resume=True
    )
    assert second.asked == ["profile_analyst"]  # nothing asked twice
    assert loop.state.steps == [
        "1:plan",
        "1:implement",
        "1:compile",
        "1:validate",
        "1:debug",
        "1:compile",
        "1:validate",
        "1:profile",
        "1:analyze",
    ]
    assert summary["best"]["iteration"] == 1 and summary["best"]["time_basis"] == "none"
    assert summary["spend"]["calls"] == 4  # the ledger survived the interruption
    assert summary["stop_reason"] == "completed 1 iteration(s)"
