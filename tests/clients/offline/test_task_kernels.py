"""Every offline-model kernel that validates also compiles at `full` for tpu-v6e, over the JaxBench tasks.

The model's first kernel for each task (from the task's traced program, as the Auto loop's first
iteration writes it) is validated at `small` in interpret mode and compiled, compile-only, at `full`
for tpu-v6e: the same source, at the check size and at the production size. One module-scoped pool
serves every task. The fast test takes one task per template family; the slow one checks every task's
source for shape-genericity (benchmarks/offline_coverage.py --first-kernel compiles them all at full).
"""

from __future__ import annotations

import pytest

from maxkernel.clients.offline.first_kernel import NoKernel, first_kernel
from maxkernel.clients.offline.model import NoTemplateFits
from maxkernel.jaxbench.registry import list_task_ids
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline.test_shape_generic import (
    changing_dims,
    code_of,
    same_kernel_from_either_trace,
    shape_literals,
)

CHIP = get_chip("tpu-v6e")
FAMILIES = [
    "12p_RMSNorm",
    "19k_Matmul_Subtract_Multiply_ReLU",
    "8p_GEMM",
    "11p_Megablox_GMM",
    "7p_Ragged_Paged_Attention",
]  # rowwise, matmul, grouped, ragged paged
SINGLE_CHIP = [t for t in list_task_ids() if not t.split("_")[0].endswith("m")]


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=300)


def kernel_for(task: str, tmp_path) -> tuple[str, dict]:
    program = describe(task).model_dump(mode="json")
    path = tmp_path / f"{task}.py"
    path.write_text(first_kernel(program, CHIP))
    return str(path), program


@pytest.mark.slow  # an end-to-end scenario: make test-slow
@pytest.mark.parametrize("task", FAMILIES)
def test_the_first_kernel_validates_at_small_and_compiles_at_full(task, evaluator, tmp_path):
    path, program = kernel_for(task, tmp_path)
    source = open(path).read()
    assert not shape_literals(source) & changing_dims(program), "a small-size dim is hard-coded"
    assert code_of(same_kernel_from_either_trace(task)) == code_of(source)
    full = evaluator.compile(path, task, "tpu-v6e", "full")
    assert full.ok, full.failure
    small = evaluator.validate(path, task, "cpu", "small", seeds=1)
    assert small.ok, small.failure


@pytest.mark.slow
@pytest.mark.parametrize("task", SINGLE_CHIP)
def test_every_task_kernel_is_the_same_source_whichever_size_it_was_traced_at(task):
    """Per task (one test each, so the slow tier spreads them over its workers; one loop of 50 took 777 s
    in one worker): the model writes a kernel (every single-chip task has a template now), no kernel
    states a small dim that changes with size in its grid or specs, and the source written from the
    `small` trace is the one written from the `full` trace. (Compiling them all at `full` is
    benchmarks/offline_coverage.py --first-kernel: minutes.)"""
    program = describe(task, "small").model_dump(mode="json")
    try:
        source = first_kernel(program, CHIP)
    except (NoKernel, NoTemplateFits) as e:
        pytest.fail(f"the offline model wrote no kernel for {task}: {e}")
    hard = shape_literals(source) & changing_dims(program)
    assert not hard, f"{task} hard-codes {sorted(hard)}"
    full_trace = first_kernel(describe(task, "full").model_dump(mode="json"), CHIP)
    assert code_of(full_trace) == code_of(source), f"{task}'s kernel depends on the size it was traced at"
