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


def _cli_estimate(kernel: str, reference: str) -> tuple[int, dict]:
    import json
    import subprocess
    import sys
    from pathlib import Path

    exe = str(Path(sys.executable).parent / "maxkernel")
    argv = [exe, "estimate", kernel, "-r", reference, "-t", "tpu-v6e", "--size", "small", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_the_reference_estimated_against_itself_is_its_xla_baseline_and_a_reader_still_tampers(tmp_path):
    # Issue 33: `estimate reference.py -r reference.py` said `tampered` (the candidate "reached" the
    # hidden reference: its own file), while a byte copy worked. The copy and the file itself now agree.
    import shutil

    copy = tmp_path / "copy_of_reference.py"
    shutil.copy(MATMUL_REF, copy)
    rc_self, itself = _cli_estimate(MATMUL_REF, MATMUL_REF)
    rc_copy, copied = _cli_estimate(str(copy), MATMUL_REF)
    assert rc_self == rc_copy == 0 and itself["ok"] and copied["ok"], itself.get("failure")
    assert itself["estimate"]["estimated_time_us"] == copied["estimate"]["estimated_time_us"] > 0
    # The adversary: another file that reads the reference is still refused.
    rc, stolen = _cli_estimate(str(ADV / "reads_reference_file.py"), MATMUL_REF)
    assert rc == 1 and not stolen["ok"] and stolen["failure"]["kind"] == "tampered", stolen
    assert "matmul_reference.py" in stolen["failure"]["summary"]
