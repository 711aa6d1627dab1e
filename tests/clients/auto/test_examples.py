"""The Auto loop asks find_examples (over MCP) and its planner, implementer and debugger prompts show them."""

from __future__ import annotations

import pytest
from conftest_paths import KERNELS

from maxkernel.clients.run_store import RunStore
from maxkernel.subagents import EXAMPLES_BUDGET_TOKENS
from maxkernel.tpu_tools.pool.workers import WorkerPool
from tests.clients.auto.test_loop import GOOD_MATMUL, PLAN, Script, code, config, fix, run_loop

# tests/kernels/vmem_1gib.py made self-contained (a kernel_source cannot import a sibling file)
VMEM_1GIB = (
    (KERNELS / "vmem_1gib.py")
    .read_text()
    .replace(
        "from _matmul_base import matmul_kernel, tiled_matmul\n", (KERNELS / "_matmul_base.py").read_text()
    )
)


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
        implementer=[code(VMEM_1GIB)],
        debugger=[fix(GOOD_MATMUL, "drop the 1 GiB scratch")],
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
    # the VMEM overflow: its guide section is already in the debugger's prompt (not repeated); the examples
    # are kernels that set vmem_limit_bytes
    section = examples_section(debug)
    assert "### 1." in section and "guide.vmem-budgets" not in section and "vmem_limit_bytes set" in section
    assert debug.count("## VMEM budgets") == 1
    assert summary["iterations"][0]["attempts"][-1]["outcome"] == "verified"
