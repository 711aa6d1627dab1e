"""What jax's TPU interpreter finds wrong with a kernel is the kernel's fault, said in one sentence from
the interpreter's own numbers; what it cannot run stays its limit. Every kernel here really runs in TPU
interpret mode (tiny shapes), and its real exception goes through the judged child's own decision."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from conftest_paths import KERNELS
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.judged.candidate_run import _failure
from maxkernel.tpu_tools.judged.interpreter_findings import kernel_finding
from maxkernel.tpu_tools.judged.interpreter_limits import (
    InterpreterFailure,
    interpreter_failure,
    lowering_rules,
)
from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

HERE = Path(__file__)
REVISIT = "jax._src.pallas.mosaic.interpret.interpret_pallas_call._check_for_revisiting"


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]  # [8, 128]


def _x_block(i, j):  # x is (rows, cols): row block i, column block j
    return i, j


def _clamped_out(i, j):  # out is (rows, cols): the row block clamped to 1, so row block 2 lands on 1
    return jnp.minimum(i, 1), j


def clamped_rows(x):  # (24, 256): three row blocks, two column blocks; j between the i steps
    return pl.pallas_call(
        _copy,
        grid=(3, 2),
        in_specs=[pl.BlockSpec((8, 128), _x_block)],
        out_specs=pl.BlockSpec((8, 128), _clamped_out),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
    )(x)


def _sum_cols(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]  # [8, 128]


def _row_out(i, j):  # out is (rows, 128): row block i, revisited over j while i stays
    return i, 0


def summed_cols(x):  # (24, 256) -> (24, 128): the accumulator pattern, j the reduction axis, last
    return pl.pallas_call(
        _sum_cols,
        grid=(3, 2),
        in_specs=[pl.BlockSpec((8, 128), _x_block)],
        out_specs=pl.BlockSpec((8, 128), _row_out),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x)


def _row(i):  # x and out are (rows, 128): row block i
    return i, 0


def ragged_rows(x):  # (20, 128): the last of three 8-row blocks is partial, as pl.cdiv sizes the grid
    return pl.pallas_call(
        _copy,
        grid=(pl.cdiv(x.shape[0], 8),),
        in_specs=[pl.BlockSpec((8, 128), _row)],
        out_specs=pl.BlockSpec((8, 128), _row),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)


def _next_row(i):  # out is (rows, 128): one block ahead, past the array at the last step
    return i + 1, 0


def output_past_rows(x):
    return pl.pallas_call(
        _copy,
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), _row)],
        out_specs=pl.BlockSpec((8, 128), _next_row),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)


def _copy_in_late(x_hbm, o_ref, buf, sem):
    start = pl.program_id(0) + 12  # rows 12:20 of a 16-row array: the DMA's source runs past it
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, 8)], buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...]  # [8, 128]


def dma_past_rows(x):
    return pl.pallas_call(
        _copy_in_late,
        grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, 128), _row),
        out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
        scratch_shapes=[pltpu.VMEM((8, 128), x.dtype), pltpu.SemaphoreType.DMA],
    )(x)


def _fixture(name: str):
    path = KERNELS / "adversarial" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_findings_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.workload


def _from_jax(exc: BaseException) -> BaseException:
    """The exception as the judged child sees it: its traceback from the first jax frame (this test's
    frames are not the judge's, and only jax's and the judge's may stand between the call and the raise)."""
    tb = exc.__traceback__
    while tb is not None and "/jax/" not in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def _run(fn, x):
    """(the judged child's Failure, the raw finding) for a kernel that raises in TPU interpret mode."""
    rules = lowering_rules()
    program = jax.make_jaxpr(fn)(x)
    with execution.tpu_interpret_mode(detect_races=True):
        with pytest.raises(Exception) as caught:  # noqa: PT011 - jax wraps the interpreter's error
            jax.block_until_ready(jax.jit(fn)(x))
    exc = _from_jax(caught.value)
    found = interpreter_failure(exc, HERE, program, rules)
    assert found is not None and not found.vetoed, found
    finding = kernel_finding(found, find_pallas_calls(program), str(exc))
    return _failure(exc, "run", HERE, program=program, rules=rules), finding


def _x(rows: int, cols: int = 128):
    return jnp.arange(rows * cols, dtype=jnp.float32).reshape(rows, cols)


def test_a_revisited_output_block_is_the_kernels_fault_named_by_output_block_and_steps():
    failure, finding = _run(clamped_rows, _x(24, 256))
    assert finding.kind == failure.kind == "revisited_output_block"
    s = failure.summary
    assert "output 0 of kernel _copy (grid (3, 2)" in s
    assert "block [8:16, 0:128] (block index (1, 0)) again at grid step (2, 0)" in s
    assert "left it at step (1, 0)" in s and "consecutive" in s
    assert "Traceback" not in s and "\n" not in s  # one sentence; the evidence is the message
    assert "Revisited block" in failure.message and failure.stage == "run"


def test_an_output_block_revisited_in_consecutive_steps_is_the_accumulator_pattern_and_runs():
    x = _x(24, 256)
    with execution.tpu_interpret_mode(detect_races=True):
        out = jax.block_until_ready(jax.jit(summed_cols)(x))
        assert not execution.races_found()
    assert jnp.array_equal(out, x[:, :128] + x[:, 128:])


def test_a_ragged_last_block_is_not_out_of_bounds():
    x = _x(20)
    with execution.tpu_interpret_mode(detect_races=True):
        out = jax.block_until_ready(jax.jit(ragged_rows)(x))
    assert jnp.array_equal(out, x)


def test_a_scalar_prefetched_block_index_past_the_array_is_out_of_bounds():
    failure, _ = _run(_fixture("prefetch_block_index_off_by_one"), _x(16))
    assert failure.kind == "out_of_bounds", failure
    assert failure.summary.startswith("input 'x_ref' is given block index (2, 0) at grid step (0,)")
    assert "block [16:24, 0:128] of an array of shape (16, 128)" in failure.summary
    assert "scalar-prefetched" in failure.summary


def test_an_output_block_index_past_the_array_is_out_of_bounds():
    failure, _ = _run(output_past_rows, _x(16))
    assert failure.kind == "out_of_bounds"
    assert "output 'o_ref' is given block index (2, 0) at grid step (1,)" in failure.summary


def test_a_dma_past_the_array_is_out_of_bounds():
    failure, _ = _run(dma_past_rows, _x(16))
    assert failure.kind == "out_of_bounds"
    assert "read of [12:20, 0:128] runs past a HBM buffer of shape (16, 128) (a DMA's" in failure.summary


def test_what_the_interpreter_cannot_run_stays_its_limit():
    """jax 0.10.2's vmapped-kernel crash (interpreter_limits.vmapped_semantics works around it) is no
    finding about the kernel."""
    x = _x(3 * 24, 256).reshape(3, 24, 256)
    failure, finding = _run(jax.vmap(summed_cols), x)
    assert finding is None and failure.kind == "interpret_unsupported", failure
    assert "safe_zip" in failure.summary


@pytest.mark.parametrize(
    ("function", "error", "kind"),
    [
        # jax reworded its message: still the kind, with the interpreter's own line
        (
            REVISIT,
            "RuntimeError: Revisited block <a layout jax has not printed yet>",
            "revisited_output_block",
        ),
        (
            "jax._src.pallas.mosaic.interpret.interpret_pallas_call.get",
            "IndexError: out of bounds somewhere new",
            "out_of_bounds",
        ),
        # not raised in the interpreter's own modules: no finding of its
        (
            "jax._src.lax.lax.foo",
            "RuntimeError: Revisited block (slice(0, 8, 1),) of output 0 in iteration (1,).",
            None,
        ),
        # raised there, but a limit: stays interpret_unsupported
        (REVISIT, "ValueError: Advanced indexers are not supported on TPU", None),
    ],
)
def test_the_interpreters_message_is_parsed_defensively(function, error, kind):
    found = InterpreterFailure(
        function=function, entry="jax._src.pallas.mosaic.interpret.x.wrapper", error=error
    )
    finding = kernel_finding(found)
    assert (finding.kind if finding else None) == kind
    if finding is not None:
        assert error.split(": ", 1)[1] in finding.summary


def test_a_finding_the_candidates_own_host_code_may_have_raised_is_not_taken_as_the_interpreters():
    error = "RuntimeError: Revisited block (slice(0, 8, 1),) of output 0 in iteration (1,)."
    found = InterpreterFailure(
        function=REVISIT, entry="e", error=error, vetoed="the program holds a callback"
    )
    assert kernel_finding(found) is None
