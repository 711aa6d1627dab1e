"""Issue 58 item 1: every verdict says where its time went, on the parent's clock, job by job and step by
step (judge/phases.py), through the real pool."""

import time

import pytest
from conftest_paths import PLUS_ONE_REF, kernel

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.judge.phases import JobClock
from maxkernel.tpu_tools.pool.workers import WorkerPool


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=120)


def test_a_clock_turns_progress_lines_into_steps_and_passes_them_on():
    seen: list[str] = []
    clock = JobClock(seen.append)
    lines = [
        "candidate: load",
        "candidate: trace",
        "candidate: compile",
        "integrity: tampered: time.perf_counter",  # evidence, not a step
        "candidate run 1/2 (seed 7)",
        "candidate run 2/2 (seed 7)",
    ]
    for line in lines:
        time.sleep(0.01)
        clock(line)
    time.sleep(0.01)
    clock.stop()
    assert seen == lines
    phases = clock.phases("candidate", "small")
    whole, steps = phases[0], phases[1:]
    assert (whole.job, whole.step, whole.size) == ("candidate", "", "small")
    assert [(p.step, p.seed, p.call) for p in steps] == [
        ("start", None, None),
        ("load", None, None),
        ("trace", None, None),
        ("interpret_compile", None, None),
        ("run", 7, 1),
        ("run", 7, 2),
    ]
    assert all(p.seconds >= 0.009 for p in steps)
    assert abs(sum(p.seconds for p in steps) - whole.seconds) < 1e-3


def test_a_verdict_carries_every_job_and_step_with_its_seconds(evaluator):
    r = evaluator.validate(
        kernel("good_dma"), PLUS_ONE_REF, "tpu-v6e", "small", check_sizes=["small"], seeds=2
    )
    assert r.ok, r.failure
    whole = [p for p in r.phases if p.step == ""]
    assert [(p.job, p.size) for p in whole] == [
        ("reference_side", "small"),
        ("compile", "small"),
        ("reference", "small"),
        ("candidate", "small"),
        ("compare", "small"),
    ]
    assert sum(p.seconds for p in whole) <= r.wall_time_s + 0.05
    steps = {
        job: [p for p in r.phases if p.job == job and p.step] for job in ("compile", "reference", "candidate")
    }
    # the compile child's own split, said as its clock
    assert [p.step for p in steps["compile"]] == ["trace", "lower", "compile"]
    assert {p.timed_by for p in steps["compile"]} == {"child"}
    # the reference ran every seed; the candidate every call, in the judge's order
    assert [p.seed for p in steps["reference"] if p.step == "reference_run"] == r.seeds
    runs = [(p.seed, p.call) for p in steps["candidate"] if p.step == "run"]
    assert runs == [(seed, i + 1) for i, seed in enumerate(r.run_order)]
    assert [p.step for p in steps["candidate"] if p.step != "run"] == [
        "start",
        "load",
        "trace",
        "interpret_compile",
    ]
    for job in ("reference", "candidate"):  # a job's steps add up to it, on the parent's clock
        total = next(p.seconds for p in whole if p.job == job)
        assert abs(sum(p.seconds for p in steps[job]) - total) < 0.01, job
