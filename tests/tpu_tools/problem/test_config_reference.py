"""Level-2-style references (CONFIG, CONFIGS, listed configs) load unmodified: sizes, shrinking, seeds, the
workload's CONFIG, chip queries and a missing package. Fixtures are our own files in that form
(tests/refs/level2/), never upstream's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.tpu_tools.errors import ReferenceLoadError
from maxkernel.tpu_tools.problem import chip_program, config_reference
from maxkernel.tpu_tools.problem.reference import load_reference

LEVEL2 = Path(__file__).resolve().parents[2] / "refs" / "level2"


def test_config_file_sizes_and_a_small_that_keeps_the_tuned_block():
    ref = load_reference(str(LEVEL2 / "rowscale_config" / "baseline.py"))
    assert ref.info.kind == "jaxbench-config"
    assert ref.info.sizes == ["small", "full"]
    assert ref.pallas
    full, small = ref.sizes_table["full"], ref.sizes_table["small"]
    assert (full["rows"], full["cols"]) == (4096, 1024)
    # rows stays a multiple of the tuned 256-row block; cols (the lane axis) of 128
    assert small["rows"] % 256 == 0 and small["rows"] < 4096
    assert small["cols"] % 128 == 0 and small["cols"] <= 1024
    assert small["rows"] * small["cols"] <= config_reference.SHRINK_ELEMENTS
    assert any("small derived from the default config by shrinking" in n for n in ref.info.notes)
    # the workload asks the chip for its lanes while it traces: it traces off the chip, as the target
    (x, w) = ref.input_shapes("small")
    out = jax.eval_shape(ref.workload, x, w)
    assert out.shape == x.shape
    assert ref.derived_size().ok


def test_seed_zero_is_the_files_own_draw_and_other_seeds_fold_in():
    ref = load_reference(str(LEVEL2 / "lengths_configs" / "baseline.py"))
    own = ref.create_inputs("small", 0)
    again = ref.create_inputs("small", 0)
    other = ref.create_inputs("small", 5)
    np.testing.assert_array_equal(np.asarray(own[0], np.float32), np.asarray(again[0], np.float32))
    assert not np.array_equal(np.asarray(own[0], np.float32), np.asarray(other[0], np.float32))
    # the integer structure keeps its own distribution: lengths within [1, width] at every seed
    width = ref.sizes_table["small"]["width"]
    for lengths in (own[1], other[1]):
        assert 1 <= int(lengths.min()) and int(lengths.max()) <= width


def test_configs_file_names_each_config_and_its_workload_sees_the_size():
    ref = load_reference(str(LEVEL2 / "lengths_configs" / "baseline.py"))
    assert ref.info.sizes[0] == "small" and "decode" in ref.info.sizes and "prefill" in ref.info.sizes
    assert ref.sizes_table["full"] == ref.sizes_table["decode"]  # the default CONFIG is the target
    assert ref.sizes_table["small"]["scale"] == 3  # under 8: structural, held
    for size in ("small", "prefill"):
        x, lengths = ref.create_inputs(size, 1)
        width = ref.sizes_table[size]["width"]
        got = np.asarray(ref.workload(x, lengths))
        cols = np.arange(x.shape[1])[None, :]
        want = np.where(cols < np.asarray(lengths)[:, None], np.asarray(x, np.float32), 0).sum(1) * 3 + width
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


def test_listed_configs_take_the_first_as_full_and_one_input_set_per_size():
    ref = load_reference(str(LEVEL2 / "listed_configs" / "baseline.py"))
    assert ref.info.sizes == ["small", "wide", "narrow", "full"]
    assert ref.sizes_table["full"] == {"p0": 32, "p1": 4096}
    (x,) = ref.create_inputs("narrow", 0)
    assert x.shape == (32, 512)
    assert any("first listed" in n for n in ref.info.notes)


def test_a_missing_package_is_one_line_naming_it_and_how_to_install():
    with pytest.raises(ReferenceLoadError) as e:
        load_reference(str(LEVEL2 / "missing_package" / "baseline.py"))
    msg = str(e.value)
    assert "maxkernel_no_such_package" in msg and "pip install maxkernel-no-such-package" in msg
    assert "\n" not in msg


def test_the_cli_says_the_missing_package_with_exit_2_and_no_traceback():
    base = str(LEVEL2 / "missing_package" / "baseline.py")
    done = subprocess.run(
        [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "compile", base, "--reference", base],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install maxkernel-no-such-package" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_ladder_keeps_blocks_and_tile_grain():
    dims = {"M": 8192, "K": 8192, "N": 28672}
    roles = {"M": "sublane", "K": "lane", "N": "lane"}
    # N keeps the tuned 2048 block that divided it, and its lane grain
    assert config_reference.ladder("N", 28672, dims, {1024, 2048}, roles) == [28672, 14336, 8192, 4096, 2048]
    assert config_reference.ladder("k", 256, {"k": 256}, set()) == [256]  # a top-k is never shrunk
    assert config_reference.held("page_size", 16) is not None
    assert config_reference.held("batch", 4) is None  # a batch of 4 is an extent


def test_chip_program_traces_for_the_target_it_is_given():
    seen = []

    def workload(x):
        from jax.experimental.pallas import tpu as pltpu

        seen.append(pltpu.get_tpu_info().chip_version.name)
        return x + 1

    x = jax.ShapeDtypeStruct((8, 128), np.float32)
    with chip_program.reference_target("tpu-v5e"):
        jax.eval_shape(chip_program.as_chip_program(workload), x)
    jax.eval_shape(chip_program.as_chip_program(workload), x)  # the tool's default target, tpu-v6e
    assert seen == ["TPU_V5E", "TPU_V6E"]


@pytest.mark.slow
def test_a_pallas_baseline_validates_against_itself_off_the_chip():
    base = str(LEVEL2 / "rowscale_config" / "baseline.py")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "maxkernel.tpu_tools.cli.main",
            "validate",
            base,
            "--reference",
            base,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(done.stdout)
    assert report["ok"], report.get("failure")
    assert [c["name"] for c in report["check_sizes"]] == ["small", "derived"]
    assert "interpret" in report["execution"]


def test_a_none_input_is_left_out_and_put_back_for_reference_and_candidate():
    from maxkernel.tpu_tools.judged.candidate import load_candidate

    path = LEVEL2 / "optional_none" / "baseline.py"
    ref = load_reference(str(path))
    x, scale = ref.create_inputs("small", 0)  # arrays only: the judge hands over arrays
    assert ref.absent_inputs == [1]
    want = np.asarray(x) * np.asarray(scale)
    np.testing.assert_allclose(np.asarray(ref.workload(x, scale)), want, rtol=1e-6)
    # the same file as the candidate is called as its own file calls it: workload(x, None, scale)
    cand = load_candidate(str(path), ref.absent_inputs)
    np.testing.assert_allclose(np.asarray(cand.workload(x, scale)), want, rtol=1e-6)


@pytest.mark.slow
def test_a_pallas_reference_the_interpreter_cannot_run_is_interpret_unsupported_not_its_fault():
    ref = str(Path(__file__).resolve().parents[2] / "refs" / "pallas_reshape_dma_reference.py")
    done = subprocess.run(
        [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "validate", ref, "--reference", ref, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    failure = json.loads(done.stdout)["failure"]
    assert failure["kind"] == "interpret_unsupported"
    assert "cannot run the reference" in failure["summary"] and "ReshapeTransform" in failure["summary"]
    assert "Traceback" not in failure["summary"]


def test_counts_of_heads_shrink_by_one_factor_and_an_alignment_floor_holds_them():
    def probe(dims):
        return dims["q_heads"] * dims["seq"] * 128

    def shapes_of(dims):
        return [
            ((dims["seq"], dims["q_heads"], 128), "bfloat16"),
            ((dims["seq"], dims["kv_heads"], 128), "bfloat16"),
        ]

    full = {"seq": 4096, "q_heads": 64, "kv_heads": 8, "batch_size": 16, "num_tokens": 16}
    small, notes = config_reference.shrink(full, set(), probe, shapes_of, budget=1 << 18)
    # kv_heads sizes a sublane axis: at its floor of 8 it holds q_heads, so the GQA ratio 8 is kept
    assert small["q_heads"] // small["kv_heads"] == 8
    assert small["batch_size"] == small["num_tokens"]  # equal and both free: one factor
    assert any("tied" in n and "q_heads" in n for n in notes)


def test_a_tpu_only_primitive_without_a_cpu_rule_is_an_interpreter_limit_not_the_references_fault():
    from types import SimpleNamespace

    from maxkernel.tpu_tools.judge.validate import _interpreter_limit

    exc = NotImplementedError(
        "MLIR translation rule for primitive 'parallel_loop' not found for platform cpu"
    )
    failure = _interpreter_limit(
        SimpleNamespace(pallas=True), exc, Path("baseline.py"), "running its workload"
    )
    assert failure is not None and failure.kind == "interpret_unsupported"
    assert "'parallel_loop'" in failure.summary
    plain = _interpreter_limit(
        SimpleNamespace(pallas=False), exc, Path("baseline.py"), "running its workload"
    )
    assert plain is None  # a plain-JAX reference's failure stays its own


def test_per_sequence_values_follow_the_count_that_shrank():
    full = {"max_num_seqs": 8, "lens": (5, 9, 13, 17, 21, 25, 29, 33), "distribution": (8, 8, 8), "k": 4}
    fitted = config_reference.fit_sequences(full, {**full, "max_num_seqs": 2})
    assert fitted["lens"] == (5, 9) and fitted["distribution"] == (2, 2, 2) and fitted["k"] == 4
