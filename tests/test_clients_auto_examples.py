"""The Auto loop asks find_examples (over MCP) and its planner, implementer and debugger prompts show them."""

from __future__ import annotations

import pytest
from conftest_paths import KERNELS
from test_clients_auto import GOOD_MATMUL, PLAN, Script, code, config, fix, run_loop

from maxkernel.clients.run_store import RunStore
from maxkernel.subagents import EXAMPLES_BUDGET_TOKENS
from maxkernel.tpu_tools.pool import WorkerPool

BAD_BLOCK = (KERNELS / "bad_block.py").read_text()


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(max_workers=2) as p:
        yield p


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def workspace(tmp_path):
    import shutil

    from conftest_paths import MATMUL_REF

    ws = tmp_path / "ws"
    (ws / "references").mkdir(parents=True)
    shutil.copyfile(MATMUL_REF, ws / "references" / "matmul_reference.py")
    return ws


def examples_section(prompt: str) -> str:
    start = prompt.index("## Working examples")
    end = prompt.find("\n## ", start + 5)
    return prompt[start : end if end >= 0 else None]


@pytest.mark.slow  # ~25 s: two tpu-v6e compiles and a validation
@pytest.mark.anyio
async def test_prompts_carry_examples_for_the_task_and_the_error(pool, workspace, tmp_path):
    script = Script(
        planner=[PLAN],
        implementer=[code(BAD_BLOCK)],
        debugger=[fix(GOOD_MATMUL, "use 128-multiple blocks")],
    )
    store = RunStore.create(tmp_path / "runs", "matmul")
    cfg = config("matmul_reference", target="tpu-v6e", profile=False)
    summary, _ = await run_loop(pool, workspace, store, cfg, script.model)
    assert script.asked == ["planner", "implementer", "debugger"]
    plan, impl, debug = script.prompts
    for role, prompt in (("planner", plan), ("implementer", impl), ("debugger", debug)):
        section = examples_section(prompt)
        assert len(section) / 4 <= EXAMPLES_BUDGET_TOKENS[role]
    # the user's matmul reference (operator dense_matmul) -> matmul kernels, named with their source
    assert "jax.matmul.matmul_kernel" in examples_section(plan) and "(jax 0." in examples_section(plan)
    # the block-shape error: the guide section is already in the debugger's prompt, kernels are added
    assert "### 1." in examples_section(debug) and "guide.block-shapes" not in examples_section(debug)
    assert summary["iterations"][0]["attempts"][-1]["outcome"] == "verified"
