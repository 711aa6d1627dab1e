"""TPU interpret mode's own limits, told apart from the kernel's faults: the vmapped-kernel crash and its
exact workaround, whose exception is whose (a forged jax frame is not jax's), callback errors worded by
their innermost error, and tracing as the target chip."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.classify import classify_exception
from maxkernel.tpu_tools.judged.interpreter_limits import (
    callback_error,
    interpreter_failure,
    jaxpr_workload,
    lowering_rules,
    own_host_code,
    vmapped_semantics,
)
from maxkernel.tpu_tools.judged.target_trace import trace_as_target

HERE = Path(__file__)


def _plus_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0  # [8, 128]


def _kernel(x):  # (16, 128): two [8, 128] row blocks, the row axis parallel
    return pl.pallas_call(
        _plus_one,
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


def _from_jax(exc: BaseException) -> BaseException:
    """The exception as the judge's child sees it: its traceback from the first jax frame (this test's
    frames are not the judge's, and only jax's and the judge's may stand between the call and the raise)."""
    tb = exc.__traceback__
    while tb is not None and "/jax/" not in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def test_a_vmapped_kernel_crashes_the_interpreter_which_is_named_and_the_compilers_semantics_run_it():
    x = jnp.arange(3 * 16 * 128, dtype=jnp.float32).reshape(3, 16, 128)
    rules = lowering_rules()
    with execution.tpu_interpret_mode():
        program, shape = jax.make_jaxpr(jax.vmap(_kernel), return_shape=True)(x)
        out_tree = jax.tree_util.tree_structure(shape)
        with pytest.raises(ValueError, match="safe_zip") as crash:
            jax.jit(jaxpr_workload(program, out_tree))(x)
        found = interpreter_failure(_from_jax(crash.value), HERE, program, rules)
        assert found is not None, "jax's interpreter raised it"
        assert found.function.endswith("interpret_pallas_call._get_randomized_grid_coordinates")
        assert "safe_zip" in found.error
        fixed, kernels = vmapped_semantics(program)
        out = jax.jit(jaxpr_workload(fixed, out_tree))(x)
    assert kernels == ["_plus_one"]
    assert jnp.array_equal(out, x + 1.0)


def test_a_frame_compiled_under_the_interpreters_file_name_is_not_the_interpreter():
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    forged: dict = {}
    exec(compile("def _get_randomized_grid_coordinates():\n    raise ValueError('safe_zip()')\n", ipc.__file__, "exec"), forged)  # fmt: skip
    program = jax.make_jaxpr(lambda x: x + 1)(1.0)
    with pytest.raises(ValueError) as caught:
        functools.reduce(lambda _, f: f(), [forged["_get_randomized_grid_coordinates"]], None)
    assert interpreter_failure(_from_jax(caught.value), HERE, program, lowering_rules()) is None
    # and with every frame kept, the test's own frame alone rules it out too
    assert interpreter_failure(caught.value, HERE, program, lowering_rules()) is None


def test_a_primitive_or_callback_the_candidate_brought_is_its_own_host_code():
    from jax._src.interpreters import mlir
    from jax.extend.core import Primitive

    before = lowering_rules()
    assert own_host_code(jax.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0), before) is None
    mine = Primitive("test_interpreter_limits_own")
    mine.def_abstract_eval(lambda x: x)
    mlir.register_lowering(mine, lambda ctx, x: [x], platform="cpu")
    assert "test_interpreter_limits_own" in own_host_code(jax.make_jaxpr(mine.bind)(1.0), before)
    # a rule jax's own code registered after the snapshot (a jax module the candidate imported first)
    # is jax's: jax's primitive and jax's rule are not the candidate's host code
    cos_cpu = mlir._platform_specific_lowerings["cpu"].pop(jax.lax.cos_p, None)
    before_cos = lowering_rules()
    mlir.register_lowering(jax.lax.cos_p, mlir._lowerings[jax.lax.cos_p].rule, platform="cpu")
    try:
        assert own_host_code(jax.make_jaxpr(jnp.cos)(1.0), before_cos) is None
    finally:
        mlir._platform_specific_lowerings["cpu"].pop(jax.lax.cos_p, None)
        if cos_cpu is not None:
            mlir._platform_specific_lowerings["cpu"][jax.lax.cos_p] = cos_cpu
    # ... but jax's own rule for a primitive the candidate made is the candidate's (even planted in jax)
    theirs = Primitive("test_interpreter_limits_jaxs")
    theirs.def_abstract_eval(lambda x: x)
    mlir.register_lowering(theirs, mlir._lowerings[jax.lax.cos_p].rule, platform="cpu")
    jax.lax.planted_p = theirs
    try:
        assert "test_interpreter_limits_jaxs" in own_host_code(jax.make_jaxpr(theirs.bind)(1.0), before)
    finally:
        del jax.lax.planted_p
    # ... but jax's helper wrapping the candidate's Python is the candidate's
    wrapped = Primitive("test_interpreter_limits_wrapped")
    wrapped.def_abstract_eval(lambda x: x)
    mlir.register_lowering(wrapped, mlir.lower_fun(lambda x: x * 2, multiple_results=False), platform="cpu")
    assert "test_interpreter_limits_wrapped" in own_host_code(jax.make_jaxpr(wrapped.bind)(1.0), before)
    callback = jax.make_jaxpr(lambda x: jax.debug.callback(print, x) or x)(1.0)
    assert "callback" in own_host_code(callback, before)
    # a jax primitive's CPU rule re-registered (twice: a freed rule's address may come back) is its own too
    cpu = mlir._platform_specific_lowerings["cpu"]
    had, old = jax.lax.sin_p in cpu, cpu.get(jax.lax.sin_p)
    try:
        for _ in range(2):
            mlir.register_lowering(jax.lax.sin_p, lambda ctx, x: [x], platform="cpu")
        assert "sin" in own_host_code(jax.make_jaxpr(jnp.sin)(1.0), before)
    finally:
        if had:
            cpu[jax.lax.sin_p] = old
        else:
            del cpu[jax.lax.sin_p]


CALLBACK = """INTERNAL: CpuCallback error: Traceback (most recent call last):
  File "/venv/site-packages/jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py", line 512, in wrapper
    return f(*args)
  File "/venv/site-packages/jax/_src/pallas/mosaic/interpret/utils.py", line 88, in to_range
    return t.indices
AttributeError: 'ReshapeTransform' object has no attribute 'indices'

At:
  /venv/site-packages/jax/_src/callback.py(120): pure_callback_impl
"""


def test_a_callback_error_is_worded_by_its_innermost_error_not_the_traceback_header():
    frames, error = callback_error(CALLBACK)
    assert error == "AttributeError: 'ReshapeTransform' object has no attribute 'indices'"
    assert frames[-1][1:] == (88, "to_range")
    f = classify_exception(RuntimeError(CALLBACK), "run")
    assert f.kind == "runtime_error"
    assert "ReshapeTransform" in f.summary and "utils.py:88 in to_range" in f.summary
    assert not f.summary.rstrip().endswith("Traceback (most recent call last):")


def test_tracing_as_the_target_sees_its_chip_and_nothing_else_changes():
    from jax.extend import backend

    target = parse_target("tpu-v6e")
    with trace_as_target(target):
        assert pltpu.get_tpu_info().chip_version == pltpu.ChipVersion.TPU_V6E
        assert backend.get_default_device().device_kind == "TPU v6 lite"
    assert backend.get_default_device().platform == "cpu"


def test_the_cli_exits_3_on_interpret_unsupported_neither_pass_nor_fail():
    from maxkernel.tpu_tools.cli.main import _verdict_exit
    from maxkernel.tpu_tools.reports import Failure, ValidationReport

    def report(kind: str | None) -> ValidationReport:
        failure = Failure(kind=kind, summary="s") if kind else None
        return ValidationReport(
            ok=kind is None, target="tpu-v6e", size="full", kernel_path="k.py", failure=failure
        )

    assert [_verdict_exit(report(k)) for k in (None, "runtime_error", "interpret_unsupported")] == [0, 1, 3]


def _callback_text(*files: str) -> str:
    frames = "".join(f'  File "{f}", line {10 + i}, in fn{i}\n' for i, f in enumerate(files))
    return (
        "INTERNAL: CpuCallback error calling callback: Traceback (most recent call last):\n"
        f"{frames}AttributeError: 'ReshapeTransform' object has no attribute 'indices'\n"
    )


def test_a_callback_through_the_standard_library_is_still_the_interpreters_and_anything_else_is_said():
    import threading

    root = Path(jax.__file__).resolve().parent
    callback, interp = root / "_src/callback.py", root / "_src/pallas/mosaic/interpret/utils.py"
    program = jax.make_jaxpr(lambda x: x + 1)(1.0)
    stdlib = threading.__file__  # jax's callbacks may run on a thread: its frames are the stdlib's
    found = interpreter_failure(RuntimeError(_callback_text(stdlib, callback, interp)), HERE, program, {})
    assert found is not None and not found.vetoed and found.function.endswith("utils.fn2")
    # a frame of another installed library (or the candidate's folder) is not jax's: said, not judged a limit
    other = Path(pytest.__file__).resolve()
    found = interpreter_failure(RuntimeError(_callback_text(callback, str(other), interp)), HERE, program, {})
    assert found is not None and "pytest" in found.vetoed and "not jax's own code" in found.vetoed
    # XLA may run the callback on the calling thread: the text then starts with that thread's stack (the
    # process's bootstrap, the judge's call into jax), which is the caller, not the callback
    caller = ["<string>", threading.__file__, str(HERE), str(root / "_src/interpreters/pxla.py")]
    found = interpreter_failure(RuntimeError(_callback_text(*caller, callback, interp)), HERE, program, {})
    assert found is not None and not found.vetoed, found
    found = interpreter_failure(
        RuntimeError(_callback_text(*caller, callback, str(other), interp)), HERE, program, {}
    )
    assert found is not None and "pytest" in found.vetoed
    mine = HERE.parent / "helper.py"
    found = interpreter_failure(RuntimeError(_callback_text(callback, interp, str(mine))), HERE, program, {})
    assert found is not None and found.vetoed
