"""A Pallas reference's failure inside jax's TPU interpreter is told from its own (interpreter_raised), also
when XLA's text holds the callback's traceback twice and the second is cut short of the interpreter."""

from pathlib import Path

import jax

from maxkernel.tpu_tools.judged.interpreter_limits import interpreter_raised

JAX = Path(jax.__file__).resolve().parent / "_src"


def _frame(path: Path, line: int, name: str) -> str:
    return f'  File "{path}", line {line}, in {name}\n'


FULL = (
    "Traceback (most recent call last):\n"
    + _frame(JAX / "callback.py", 437, "io_callback_impl")
    + _frame(JAX / "pallas/mosaic/interpret/interpret_pallas_call.py", 80, "wrapper")
    + _frame(JAX / "pallas/mosaic/interpret/interpret_pallas_call.py", 1056, "dma_start")
    + _frame(JAX / "core.py", 917, "check_scalar_conversion")
    + "TypeError: Only scalar arrays can be converted to Python scalars; got arr.ndim=1\n"
)
SHORT = (
    "Traceback (most recent call last):\n"
    + _frame(JAX / "core.py", 917, "check_scalar_conversion")
    + "TypeError: Only scalar arrays can be converted to Python scalars; got arr.ndim=1\n"
)


def test_the_interpreters_failure_is_found_in_the_full_traceback_before_a_cut_one():
    exc = RuntimeError(
        "INTERNAL: CpuCallback error calling callback: jax.io_callback failed\n" + FULL + SHORT
    )
    found = interpreter_raised(exc, Path("/nowhere/baseline.py"))
    assert found is not None and not found.vetoed
    assert found.entry.endswith("interpret_pallas_call.wrapper") and "ndim=1" in found.error


def test_a_failure_through_the_references_own_code_is_not_the_interpreters():
    own = FULL.replace(
        _frame(JAX / "core.py", 917, "check_scalar_conversion"), _frame(Path("/refs/baseline.py"), 12, "k")
    )
    exc = RuntimeError("INTERNAL: CpuCallback error calling callback:\n" + own)
    assert interpreter_raised(exc, Path("/refs/baseline.py")) is None


def test_a_reference_callback_error_cut_to_jaxs_frames_is_the_interpreters():
    """XLA kept only the innermost frames (all jax's): for a trusted Pallas reference run interpreted, that is
    the interpreter's callback failing, said as interpret_unsupported."""
    from types import SimpleNamespace

    from maxkernel.tpu_tools.judge.validate import _interpreter_limit

    exc = RuntimeError("INTERNAL: CpuCallback error calling callback: " + SHORT)
    failure = _interpreter_limit(SimpleNamespace(pallas=True), exc, Path("/refs/baseline.py"), "running it")
    assert failure is not None and failure.kind == "interpret_unsupported"
    own = SHORT.replace(
        _frame(JAX / "core.py", 917, "check_scalar_conversion"), _frame(Path("/refs/b.py"), 3, "f")
    )
    exc = RuntimeError("INTERNAL: CpuCallback error calling callback: " + own)
    assert (
        _interpreter_limit(SimpleNamespace(pallas=True), exc, Path("/refs/baseline.py"), "running it") is None
    )
