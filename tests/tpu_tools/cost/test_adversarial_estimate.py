"""The static estimate is the objective searches optimize: a kernel estimated in-process must not rewrite it.

The estimate and analyze jobs run the candidate's Python beside the estimator, so they arm the same
integrity guard as validation, with the estimator's modules watched too; in a batch (autotune), nothing
after a tampering candidate is trusted.
"""

import pytest
from conftest_paths import KERNELS, MATMUL_REF

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.judge.validate import reference_side
from maxkernel.tpu_tools.judged.estimate_jobs import estimate_batch_job
from maxkernel.tpu_tools.pool.workers import JobSpec, WorkerPool

ADV = KERNELS / "adversarial"


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=180)


def test_patching_the_estimator_is_tampered_and_the_honest_twin_is_estimated(evaluator):
    honest = evaluator.estimate(str(ADV / "honest_epilogue.py"), MATMUL_REF, "tpu-v6e", "small")
    assert honest.ok and honest.estimate is not None, honest.failure
    patched = evaluator.estimate(str(ADV / "patches_estimator.py"), MATMUL_REF, "tpu-v6e", "small")
    assert not patched.ok and patched.failure.kind == "tampered", patched.failure
    assert "estimate" in patched.failure.summary


def test_in_a_batch_nothing_after_a_tampering_candidate_is_trusted():
    paths = [str(ADV / "patches_estimator.py"), str(ADV / "honest_epilogue.py")]
    spec = JobSpec(
        fn="maxkernel.tpu_tools.judged.estimate_jobs:estimate_batch_job",
        kwargs={
            "kernel_paths": paths,
            "reference_side": reference_side(MATMUL_REF, "small")[1].model_dump(mode="json"),
            "target": "tpu-v6e",
            "size": "small",
        },
        timeout_s=300,
    )
    with WorkerPool(max_workers=1) as pool:
        outcome = pool.run(spec)
    assert outcome.status == "ok", outcome.message
    first, second = outcome.result["results"]
    assert not first["ok"] and first["error"].startswith("tampered")
    assert not second["ok"] and "earlier candidate" in second["error"]
    assert estimate_batch_job  # the job under test (imported so a rename breaks this test loudly)
