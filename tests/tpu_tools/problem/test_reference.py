"""References load in all three formats; candidates and references fail with precise messages."""

import pytest
from conftest_paths import MATMUL_REF, REFS, kernel

from maxkernel.tpu_tools.errors import CandidateLoadError, ReferenceLoadError, UsageError
from maxkernel.tpu_tools.judged.candidate import load_candidate
from maxkernel.tpu_tools.problem.reference import load_reference


def test_maxkernel_format_reference_is_seedable_with_sizes():
    ref = load_reference(MATMUL_REF)
    assert ref.info.kind == "maxkernel" and ref.info.seedable
    a0, _ = ref.create_inputs("small", 0)
    a1, _ = ref.create_inputs("small", 1)
    assert a0.shape == (256, 512) and not (a0 == a1).all()
    assert ref.get_flops("small") == 2 * 256 * 512 * 256
    assert ref.input_shapes("full")[0].shape == (4096, 4096)


def test_jaxbench_style_reference_loads_with_fixed_seed_note():
    ref = load_reference(str(REFS / "jaxbench_style_matmul.py"))
    assert ref.info.kind == "jaxbench-style" and not ref.info.seedable
    assert ref.info.sizes == ["full"]
    assert any("fixed seed" in n for n in ref.info.notes)
    a, b = ref.create_inputs("full", None)
    assert a.shape == (256, 256) and str(a.dtype) == "bfloat16"


def test_maxkernel_task_dir_loads_with_tolerances():
    ref = load_reference(str(REFS / "maxkernel_task"))
    assert ref.info.kind == "maxkernel-task-dir"
    assert ref.info.atol == 0.02 and ref.info.name == "small_gemm"
    a, b = ref.create_inputs("full", None)
    assert ref.workload(a, b).shape == (256, 256)


def test_maxkernel_task_dir_whose_input_code_uses_jnp_unimported(tmp_path):
    """MaxKernel's adapted tasks use jnp (e.g. in a default argument) without importing it."""
    import shutil

    task = tmp_path / "task"
    shutil.copytree(REFS / "maxkernel_task", task)
    (task / "kernel_task.yaml").write_text(
        "task_id: unimported\ninput_gen_code: |\n"
        "  def get_inputs(dtype=jnp.bfloat16):\n"
        "      k1, k2 = jax.random.split(jax.random.key(7))\n"
        "      return [jax.random.normal(k1, (128, 128), dtype), jax.random.normal(k2, (128, 128), dtype)]\n"
    )
    ref = load_reference(str(task))
    a, b = ref.create_inputs("full", None)
    assert str(a.dtype) == "bfloat16" and ref.workload(a, b).shape == (128, 128)


def test_jaxbench_id_resolves():
    ref = load_reference("8p")
    assert ref.info.name == "8p_GEMM" and "small" in ref.info.sizes


def test_missing_reference_is_a_usage_error():
    with pytest.raises(ReferenceLoadError, match="not found"):
        load_reference("no/such/file.py")
    with pytest.raises(ReferenceLoadError, match="unknown JaxBench task"):
        load_reference("999z")


def test_candidate_errors():
    with pytest.raises(UsageError, match="not found"):
        load_candidate("/nope/kernel.py")
    with pytest.raises(CandidateLoadError) as e:
        load_candidate(kernel("import_error"))
    assert e.value.line == 8
    assert isinstance(load_candidate(kernel("good_matmul")).sha256, str)
