"""The `maxkernel` CLI as a user runs it (a subprocess): exit codes 0/1/2, one-line errors, --json = the models."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_paths import MATMUL_REF, kernel

from maxkernel.tpu_tools.hardware.chips import ChipSpec
from maxkernel.tpu_tools.profile.run import ProfileReport
from maxkernel.tpu_tools.profile.trace_summary import TraceSummary
from maxkernel.tpu_tools.reports import CompileReport, ValidationReport

_ENTRY = Path(sys.executable).parent / "maxkernel"
MAXKERNEL = [str(_ENTRY)] if _ENTRY.exists() else [sys.executable, "-m", "maxkernel.tpu_tools.cli.main"]


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*MAXKERNEL, *args], capture_output=True, text=True, timeout=timeout)


def assert_usage_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("maxkernel:")]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_chips_and_tasks_json():
    p = run("chips", "--json")
    assert p.returncode == 0, p.stderr
    chips = [ChipSpec.model_validate(c) for c in json.loads(p.stdout)]
    assert "tpu-v6e" in {c.name for c in chips}
    p = run("tasks", "--json")
    assert p.returncode == 0, p.stderr
    tasks = json.loads(p.stdout)
    assert len([t for t in tasks if not t["mesh_devices"]]) == 50  # the single-chip 50, then 51m-53m marked
    assert {t["id"][:3] for t in tasks if t["mesh_devices"]} == {"51m", "52m", "53m"}


def test_compile_good_kernel_is_0_with_a_compile_report():
    p = run("compile", kernel("good_matmul"), "-r", MATMUL_REF, "-t", "tpu-v6e", "--json")
    assert p.returncode == 0, p.stderr
    r = CompileReport.model_validate_json(p.stdout)
    assert r.ok and r.num_pallas_calls == 1


def test_missing_kernel_file_is_2_with_one_line():
    p = run("compile", "no_such_kernel.py", "-r", MATMUL_REF)
    assert_usage_error(p, "kernel file not found")


def test_bad_target_and_reference_are_2():
    assert_usage_error(
        run("validate", kernel("good_matmul"), "-r", MATMUL_REF, "-t", "tpu-v99"), "unknown target"
    )
    assert_usage_error(
        run("profile", kernel("good_matmul"), "-r", "missing_ref.py"), "reference file not found"
    )


@pytest.mark.slow  # two interpret-mode validations with race detection: ~10-20 s on 2 shared cores
def test_validate_wrong_kernel_is_1_and_good_kernel_is_0():
    p = run("validate", kernel("off_by_one"), "-r", MATMUL_REF, "--seeds", "1", "--json")
    assert p.returncode == 1, p.stderr
    r = ValidationReport.model_validate_json(p.stdout)
    assert r.failure.kind == "output_mismatch"
    p = run("validate", kernel("good_matmul"), "-r", MATMUL_REF, "--seeds", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "correct" in p.stdout


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    trace_dir = tmp_path_factory.mktemp("traces")
    p = run(
        "profile",
        kernel("plain_jax"),
        "-r",
        MATMUL_REF,
        "--size",  # off the chip the production size would time the reference on CPU at 4096^3
        "small",
        "--reps",
        "5",
        "--trace-dir",
        str(trace_dir),
        "--json",
    )
    return p, trace_dir


def test_profile_json_is_a_profile_report(profiled):
    p, trace_dir = profiled
    assert p.returncode == 0, p.stderr
    r = ProfileReport.model_validate_json(p.stdout)
    assert r.ok and r.candidate_measured and r.speedup is not None
    assert r.trace_path.startswith(str(trace_dir))


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_profile_pallas_human_output_says_not_measured():
    p = run(
        "profile", kernel("good_matmul"), "-r", MATMUL_REF, "-t", "tpu-v6e", "--size", "small", "--reps", "3"
    )
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())  # rich wraps lines
    # the tier it got (llo: the compiler's schedule, as the XLA baseline it is ranked against)
    assert "not measured: target chip absent" in out and "static estimate (llo)" in out


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_profile_broken_candidate_is_1():
    p = run("profile", kernel("import_error"), "-r", MATMUL_REF, "--json")
    assert p.returncode == 1, p.stderr
    assert ProfileReport.model_validate_json(p.stdout).failure.kind == "load_error"


def test_trace_text_and_json(profiled):
    _, trace_dir = profiled
    p = run("trace", str(trace_dir), "--top", "3")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("trace ") and "hint:" in p.stdout
    p = run("trace", str(trace_dir), "--json")
    assert p.returncode == 0, p.stderr
    assert TraceSummary.model_validate_json(p.stdout).n_op_events > 0


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("empty.json.gz", b"", "empty"),
        ("corrupt.json.gz", b"\x1f\x8b\x08\x00garbage", "gzip"),
        ("notes.json", b"hello", "unknown format"),
    ],
)
def test_bad_trace_files_are_2_with_one_line(tmp_path, name, content, needle):
    f = tmp_path / name
    f.write_bytes(content)
    assert_usage_error(run("trace", str(f)), needle)


def test_missing_trace_is_2():
    assert_usage_error(run("trace", "/no/such/trace"), "no such trace")
