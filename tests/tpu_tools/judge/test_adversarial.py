"""Kernels that try to game validation (tests/kernels/adversarial/), each failing with its own verdict kind,
next to honest twins that pass. No OS sandbox is involved: these are checks our code makes.
"""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from conftest_paths import KERNELS, MATMUL_REF, PLUS_ONE_REF, REFS, kernel

from maxkernel.jaxbench import registry
from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.judged.candidate import load_candidate
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.reference import load_reference
from maxkernel.tpu_tools.problem.work_check import census_of, work_verdict

ADV = KERNELS / "adversarial"
ADAMW_REF = str(REFS / "scalar_inputs" / "adamw_step_reference.py")  # a 0-d int32 step count among its inputs
SECRET = "s3cr3t-token-value-0042"


def adv(name: str) -> str:
    return str(ADV / f"{name}.py")


@pytest.fixture(scope="module")
def evaluator():
    # The secret and the reference's path reach the child's environment the way a server's would.
    env = {"MAXKERNEL_ADVERSARY_SECRET": SECRET, "MAXKERNEL_REFERENCE_PATH": MATMUL_REF}
    with WorkerPool(max_workers=2, env=env) as pool:
        yield Evaluator(pool, timeout_s=180)


# ---- separation: the candidate's process holds nothing of the reference ---------------------------


@pytest.mark.parametrize("name", ["via_sys_modules", "via_stack_frames", "via_gc", "via_argv_env"])
def test_the_reference_is_not_in_the_candidates_process(evaluator, name):
    """Each kernel calls the reference's workload if it can find it, else writes zeros: it finds nothing."""
    r = evaluator.validate(adv(name), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "output_mismatch", r.failure
    assert r.per_seed[0].worst_actual == 0.0


def test_reading_the_reference_file_is_refused(evaluator):
    r = evaluator.validate(adv("reads_reference_file"), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "reached_reference", r.failure
    assert "matmul_reference.py" in r.failure.summary


def test_reading_the_reference_file_while_compiling_is_refused(evaluator):
    """compile imports and traces the candidate too: the same guard, so compile alone catches it."""
    r = evaluator.compile(adv("reads_reference_file"), MATMUL_REF, "cpu")
    assert r.failure.kind == "reached_reference", r.failure
    assert "matmul_reference.py" in r.failure.summary


def test_importing_the_task_registry_is_refused(evaluator):
    r = evaluator.validate(adv("imports_jaxbench"), "8p", "cpu", seeds=1)
    assert r.failure.kind == "reached_reference", r.failure
    assert "maxkernel.jaxbench" in r.failure.summary


def test_rewriting_the_reference_is_refused_and_the_verdict_hashes_what_ran(evaluator, tmp_path):
    ref = tmp_path / "ref" / "matmul_reference.py"
    ref.parent.mkdir()
    shutil.copy(MATMUL_REF, ref)
    cand_dir = tmp_path / "cand"
    cand_dir.mkdir()
    for f in ("rewrites_reference.py", "_pallas.py"):
        shutil.copy(ADV / f, cand_dir / f)
    (cand_dir / "rewrite_target.txt").write_text(str(ref))
    before = ref.read_bytes()
    r = evaluator.validate(str(cand_dir / "rewrites_reference.py"), str(ref), "cpu", seeds=1)
    assert r.failure.kind == "reached_reference", r.failure
    assert ref.read_bytes() == before
    assert r.reference.sha256 == hashlib.sha256(before).hexdigest()


def test_failure_text_shows_no_environment_values(evaluator):
    r = evaluator.validate(adv("leaks_env"), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "python_error", r.failure
    assert "leaks_env.py:7" in r.failure.message  # the candidate's own traceback line
    assert SECRET not in r.failure.summary + r.failure.message
    assert "MAXKERNEL_REFERENCE_PATH" not in r.failure.message


# ---- the kernel does the work -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["jnp_then_pallas_copy", "dummy_pallas_beside_matmul", "pallas_in_dead_branch"]
)
def test_plain_jax_doing_the_work_is_work_outside_kernel(evaluator, name):
    r = evaluator.validate(adv(name), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "work_outside_kernel", r.failure
    assert "dot_general" in r.failure.summary and "%" in r.failure.summary
    assert r.work is not None and r.work.outside_matmul_flops > 0


def test_allow_plain_jax_keeps_the_escape(evaluator):
    # the flag is what is tested: one seed at small (the derived size adds ~15 s of the same run)
    r = evaluator.validate(
        adv("jnp_then_pallas_copy"), MATMUL_REF, "cpu", seeds=1, allow_plain_jax=True, check_sizes=["small"]
    )
    assert r.ok, r.failure


def test_host_callback_counting_calls_is_refused(evaluator):
    r = evaluator.validate(adv("right_for_three_calls"), MATMUL_REF, "cpu")
    assert r.failure.kind == "host_callback", r.failure
    assert "io_callback" in r.failure.summary


def test_census_tells_honest_kernels_from_wrappers():
    """In-process: the honest kernels (tests, examples, JaxBench Pallas references) carry their work."""
    ref = load_reference(MATMUL_REF)
    shapes = ref.input_shapes("small")
    ref_census = census_of(jax.make_jaxpr(ref.workload)(*shapes))
    honest = [
        adv("honest_epilogue"),
        kernel("good_matmul"),
        str(Path(MATMUL_REF).with_name("matmul_kernel.py")),
    ]
    for path in honest:
        census = census_of(jax.make_jaxpr(load_candidate(path).workload)(*shapes))
        assert work_verdict(census, ref_census) is None, path
    for task in ("1p", "8p", "12p", "19k"):
        t = load_reference(task)
        s = t.input_shapes("small")
        cand = load_candidate(str(registry.task_path(task).parent / "pallas_reference.py"))
        census = census_of(jax.make_jaxpr(cand.workload)(*s))
        assert work_verdict(census, census_of(jax.make_jaxpr(t.workload)(*s))) is None, task
        assert census.inside_flops and not census.outside_matmul_flops


# ---- inputs the kernel cannot predict ---------------------------------------------------------------


@pytest.mark.slow  # three 3-seed validations: ~20-30 s on 2 shared cores
def test_memorized_answers_for_the_old_fixed_seeds_fail_on_random_seeds(evaluator):
    # it memorized small's answers (small's shape too): as a kernel for small, checked at small alone, it
    # passes seed 0's own draw (at the production target or the derived size it fails as shape_specialized;
    # seeds 1 and 2 of a validation run other input regimes, so those it memorized never come up)
    small = ["small"]
    fixed = evaluator.validate(
        adv("memorized_seeds"),
        MATMUL_REF,
        "cpu",
        "small",
        seeds=1,
        seed_offset=0,
        allow_plain_jax=True,
        check_sizes=small,
    )
    assert fixed.ok, "the exploit must be real: it passes on seed 0"
    r = evaluator.validate(
        adv("memorized_seeds"), MATMUL_REF, "cpu", "small", allow_plain_jax=True, check_sizes=small
    )
    assert r.failure.kind == "output_mismatch", r.failure
    assert r.seed_offset is not None and r.seeds == list(range(r.seed_offset, r.seed_offset + 3))
    again = evaluator.validate(
        adv("memorized_seeds"),
        MATMUL_REF,
        "cpu",
        "small",
        seed_offset=r.seed_offset,
        allow_plain_jax=True,
        check_sizes=small,
    )
    assert again.seeds == r.seeds and again.per_seed[0].max_abs_err == r.per_seed[0].max_abs_err


@pytest.mark.slow  # three one-size validations: ~20-30 s on 2 shared cores
def test_a_scalar_input_baked_as_a_constant_fails_on_fresh_seeds(evaluator):
    """The step count is a 0-d input each seed's key draws (1..1000): a kernel that bakes the default key's
    step in passes that seed alone; the judge's fresh seeds carry other steps, so it fails where the
    honest kernel, reading the step from SMEM, passes."""
    small = ["small"]
    fixed = evaluator.validate(
        adv("adamw_baked_step"), ADAMW_REF, "cpu", "small", seeds=1, seed_offset=0, check_sizes=small
    )
    assert fixed.ok, "the exploit must be real: it passes on seed 0 (the default key: step 605)"
    r = evaluator.validate(adv("adamw_baked_step"), ADAMW_REF, "cpu", "small", check_sizes=small)
    assert r.failure.kind == "output_mismatch", r.failure
    assert r.seed_offset not in (None, 0)
    honest = evaluator.validate(
        adv("adamw_step_honest"), ADAMW_REF, "cpu", "small", seed_offset=r.seed_offset, check_sizes=small
    )
    assert honest.ok, honest.failure


@pytest.mark.slow  # three validations at two check sizes each: ~30-40 s on 2 shared cores
def test_zeros_above_the_small_size_fail_the_larger_case(evaluator):
    # by default validate checks the derived size too: right at small only is shape_specialized
    default = evaluator.validate(adv("zeros_above_small"), MATMUL_REF, "cpu", seeds=1)
    assert default.failure.kind == "shape_specialized", default.failure
    assert default.failure.sizes_failed == ["derived"] and default.failure.cause_kind == "output_mismatch"
    # at check sizes the caller chose, the kernel program at the target (its zeros branch) is a warning
    small = evaluator.validate(adv("zeros_above_small"), MATMUL_REF, "cpu", seeds=1, check_sizes=["small"])
    assert small.ok, small.failure
    assert small.target_program.startswith("differs from every validated one ("), small
    assert any(w.startswith("the kernel program at full was not validated") for w in small.warnings)
    larger = InputCase(name="larger_than_small", grow=2)
    r = evaluator.validate(adv("zeros_above_small"), MATMUL_REF, "cpu", seeds=1, case=larger)
    assert r.failure.kind == "output_mismatch", r.failure
    honest = evaluator.validate(kernel("good_matmul"), MATMUL_REF, "cpu", seeds=1, case=larger)
    assert honest.ok, honest.failure


def test_no_seeds_is_a_usage_error_and_nan_always_fails(evaluator):
    with pytest.raises(UsageError, match="at least 1"):
        evaluator.validate(adv("nan_output"), MATMUL_REF, "cpu", seeds=0)
    r = evaluator.validate(adv("nan_output"), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "output_mismatch" and r.per_seed[0].nan_count > 0


def test_cli_seeds_0_exits_2_with_one_line():
    entry = Path(sys.executable).parent / "maxkernel"
    p = subprocess.run(
        [str(entry), "validate", adv("nan_output"), "-r", MATMUL_REF, "--seeds", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--seeds" in lines[0] and "got 0" in lines[0], p.stderr


# ---- inputs like a model's (problem/input_regimes.py) ----------------------------------------------------
QUANT_REF = str(REFS / "quantizable_projection_reference.py")


@pytest.mark.slow  # two 12p validations at small: ~20-45 s on 2 shared cores
def test_newton_rsqrt_from_one_passes_the_references_draw_and_fails_a_models(evaluator):
    """Three Newton steps from 1.0 are exact on N(0,1) rows only: seed 1 (channel scales) and 2 (heavy tails
    at a global scale) catch it by default; alone, the reference's own draw (one seed) does not."""
    small = ["small"]
    own = evaluator.validate(adv("rms_newton_rsqrt_from_one"), "12p", "cpu", seeds=1, check_sizes=small)
    assert own.ok, own.failure
    assert [s.inputs for s in own.per_seed] == ["reference"]
    r = evaluator.validate(adv("rms_newton_rsqrt_from_one"), "12p", "cpu", check_sizes=small)
    assert r.failure.kind == "output_mismatch", r.failure
    assert [(s.inputs, s.ok) for s in r.per_seed] == [
        ("reference", True),
        ("channel_scales", False),
        ("heavy_tails", False),
    ]
    assert (
        "inputs of the wrong seeds" in r.failure.summary
        and "right on the reference's own draw" in r.failure.summary
    )


@pytest.mark.slow  # two 32k validations at small: ~20-40 s on 2 shared cores
def test_one_row_block_broadcast_passes_iid_inputs_and_fails_where_samples_differ(evaluator):
    """32k's per-row logsumexp is the same number for every row to within one bf16 ulp on the task's own
    draw: there the check cannot tell (weak_check, not a pass); seed 1's per-sample scales (channel_scales)
    make rows differ, and the kernel that computed 8 rows and broadcast them is wrong there."""
    small = ["small"]
    own = evaluator.validate(adv("one_row_block_broadcast_32k"), "32k", "cpu", seeds=1, check_sizes=small)
    assert own.failure is not None and own.failure.kind == "weak_check", own.failure
    r = evaluator.validate(adv("one_row_block_broadcast_32k"), "32k", "cpu", check_sizes=small)
    assert r.failure is not None and r.failure.kind == "output_mismatch", r.failure
    assert ("channel_scales", False) in [(s.inputs, s.ok) for s in r.per_seed]


@pytest.mark.slow  # four projection validations at small: ~40-75 s on 2 shared cores
def test_int8_per_tensor_activations_fail_on_outlier_channels_and_an_honest_kernel_passes(evaluator):
    small = ["small"]
    own = evaluator.validate(adv("int8_per_tensor_projection"), QUANT_REF, "cpu", seeds=1, check_sizes=small)
    assert own.ok, own.failure
    r = evaluator.validate(adv("int8_per_tensor_projection"), QUANT_REF, "cpu", check_sizes=small)
    assert r.failure.kind == "output_mismatch", r.failure
    assert r.per_seed[1].inputs == "channel_scales" and not r.per_seed[1].ok
    # the seeds are recorded: --seed-offset draws the same regimes' inputs again
    again = evaluator.validate(
        adv("int8_per_tensor_projection"), QUANT_REF, "cpu", check_sizes=small, seed_offset=r.seed_offset
    )
    assert [(s.inputs, s.max_abs_err) for s in again.per_seed] == [
        (s.inputs, s.max_abs_err) for s in r.per_seed
    ]
    honest = evaluator.validate(adv("honest_epilogue"), QUANT_REF, "cpu", check_sizes=small)
    assert honest.ok, honest.failure


def test_a_reference_overflowing_on_a_regime_falls_back_to_its_own_draw_and_says_so(evaluator):
    """exp of channel-scaled N(0,1) overflows in f32: that seed runs the reference's own draw, said per seed."""
    r = evaluator.validate(
        kernel("pallas_exp"), str(REFS / "naive_exp_reference.py"), "cpu", check_sizes=["small"]
    )
    assert r.ok, r.failure
    fell = r.per_seed[1]
    assert fell.inputs == "reference", fell
    assert fell.inputs_note.startswith("channel_scales inputs fell back to the reference's own draw: ")
    assert "NaN/inf" in fell.inputs_note
    assert any(w.startswith(f"seed {fell.seed}: channel_scales inputs fell back") for w in r.warnings), (
        r.warnings
    )


# ---- the judge's integrity in the candidate's process -------------------------------------------------


def test_patching_the_race_detector_is_tampered(evaluator):
    r = evaluator.validate(adv("patches_race_detector"), PLUS_ONE_REF, "tpu-v6e", seeds=1)
    assert r.failure.kind == "tampered", r.failure
    assert "RaceDetectionState.check_write" in r.failure.summary


def test_patching_the_clock_is_tampered(evaluator):
    r = evaluator.validate(adv("patches_clock"), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "tampered", r.failure
    assert "time.perf_counter" in r.failure.summary
    assert any("static scan" in w and "time.perf_counter" in w for w in r.warnings)  # the second signal


# ---- blame -------------------------------------------------------------------------------------------


def test_keyboard_interrupt_is_the_candidates_failure(evaluator):
    r = evaluator.validate(adv("keyboard_interrupt"), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "python_error", r.failure
    assert "KeyboardInterrupt" in r.failure.summary and r.failure.line == 5
    assert "keyboard_interrupt.py:5" in r.failure.message


@pytest.mark.slow  # two 13p validations with 12 calibration seeds: ~20-30 s on 2 shared cores
def test_scalar_output_an_honest_kernel_passes_and_a_constant_fails(evaluator):
    honest = evaluator.validate(adv("honest_13p"), "13p", "cpu")
    assert honest.ok, honest.failure
    assert not honest.weak_check
    # seeds 1 and 2 scale the inputs (input_regimes.py): the loss moves between seeds past the task's atol,
    # so no constant passes them all and the task's tolerance stands (on own-draw seeds alone it tightens)
    assert [s.inputs for s in honest.per_seed] == ["reference", "channel_scales", "heavy_tails"]
    const = evaluator.validate(adv("constant_13p"), "13p", "cpu")
    assert const.failure.kind == "output_mismatch", const.failure


@pytest.mark.slow  # two validations: ~20-30 s on 2 shared cores
def test_honest_twins_pass(evaluator):
    r = evaluator.validate(adv("honest_epilogue"), MATMUL_REF, "cpu", seeds=2)
    assert r.ok, r.failure
    # a JaxBench Pallas reference lives inside the hidden tasks dir: it is the one file left visible
    r = evaluator.validate(str(registry.task_path("8p").parent / "pallas_reference.py"), "8p", "cpu", seeds=1)
    assert r.ok, r.failure


# ---- references (#13): typed key, default size, reference_error ----------------------------------------


def test_a_reference_splitting_its_typed_key_works(evaluator):
    r = evaluator.validate(kernel("good_dma"), str(REFS / "split_key_reference.py"), "tpu-v6e", seeds=2)
    assert r.ok, r.failure
    assert r.size == "full" and "production" in r.size_note  # the target; checked at small + derived
    assert [c.size for c in r.checks if c.what == "validate"] == ["small", "derived"]


def test_a_reference_failing_on_its_own_is_reference_error(evaluator):
    r = evaluator.validate(kernel("good_dma"), str(REFS / "traced_shape_reference.py"), "cpu", seeds=1)
    assert r.failure.kind == "reference_error", r.failure
    assert r.failure.line == 16 and "line 16" in r.failure.summary
    r = evaluator.validate(kernel("good_dma"), str(REFS / "import_fails_reference.py"), "cpu", seeds=1)
    assert r.failure.kind == "reference_error" and r.failure.line == 6, r.failure
    c = evaluator.compile(kernel("good_dma"), str(REFS / "traced_shape_reference.py"))
    assert c.failure.kind == "reference_error", c.failure


def test_default_size_is_the_references_only_size(evaluator):
    c = evaluator.compile(kernel("good_matmul"), str(REFS / "jaxbench_style_matmul.py"))
    assert c.ok, c.failure
    assert c.size == "full" and "only size" in c.size_note


@pytest.mark.parametrize(
    ("name", "needle"),
    [("spawns_process", "subprocess.Popen"), ("uses_ctypes", "ctypes."), ("patches_np_save", "numpy.save")],
)
def test_processes_ctypes_or_a_broken_judge_are_tampered(evaluator, name, needle):
    r = evaluator.validate(adv(name), MATMUL_REF, "cpu", seeds=1)
    assert r.failure.kind == "tampered", r.failure
    assert needle in r.failure.summary


def test_dead_or_input_free_kernels_beside_plain_jax_are_flagged_but_a_helper_kernel_is_not():
    sys.path.insert(0, str(ADV))
    try:
        from _pallas import copy, fill, matmul
    finally:
        sys.path.remove(str(ADV))
    import jax.numpy as jnp

    a = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    b = jax.ShapeDtypeStruct((512, 256), jnp.float32)

    def dead(a, b):
        copy(a[:8, :128])  # traced, never used
        return a[:, :256] * 2.0

    def input_free(a, b):
        return a[:, :256] + fill(jnp.zeros((8, 128)), (8, 128), jnp.float32, 1.0)[0, 0]

    def honest_with_a_helper_kernel(a, b):
        return matmul(a, b) + fill(jnp.zeros((8, 128)), (8, 128), jnp.float32, 0.0)[0, 0]

    assert "never reaches the result" in work_verdict(census_of(jax.make_jaxpr(dead)(a, b)), None)
    assert "reads none of the inputs" in work_verdict(census_of(jax.make_jaxpr(input_free)(a, b)), None)
    assert work_verdict(census_of(jax.make_jaxpr(honest_with_a_helper_kernel)(a, b)), None) is None
