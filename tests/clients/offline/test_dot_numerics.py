"""The offline model writes each dot at the numerics the target gives the reference's (issue 38, item 5).

On a TPU, XLA computes an f32 dot at DEFAULT precision with its operands rounded to bf16, in one MXU pass
(BF16_BF16_F32), at HIGH in three (bf16_3x), at HIGHEST in f32. A kernel that computes the f32 dot in f32
is more exact than the reference there and 2.5x slower on the MXU; one that computes a HIGHEST dot in one
bf16 pass is a cheat. So the kernel's dot follows the reference's precision: a bf16 pass at DEFAULT, the
bf16_3x split at HIGH, Mosaic's f32 matmul at HIGHEST. Checked on the emitted text, on its numbers in
interpret mode against each algorithm computed in plain JAX, and by compiling it for v6e at full.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.subagents.render import chip_facts
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.emit import body_lines
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline.test_stacked_matmul import REF

PRECISION = {"default": "", "high": ", precision='high'", "highest": ", precision='highest'"}
CPU_CHIP = {
    **get_chip("tpu-v6e").model_dump(),
    "numerics": "cpu",
}  # the Auto loop's design chip for --target cpu


def _reference(tmp_path: Path, precision: str, dtype: str = "float32") -> tuple[Path, dict]:
    body = f"jnp.einsum('btd,gdf->btgf', x, w{PRECISION[precision]}) + b"
    text = REF.replace("BIAS", "(2, s['f'])").replace("BODY", body)
    if dtype != "float32":
        text = text.replace(
            "return x, w, b", f"return x.astype(jnp.{dtype}), w.astype(jnp.{dtype}), b.astype(jnp.{dtype})"
        )
    path = tmp_path / f"ref_{precision}_{dtype}.py"
    path.write_text(text)
    return path, describe(str(path)).model_dump(mode="json")


def _kernel(tmp_path: Path, precision: str, chip=None, dtype: str = "float32") -> tuple[Path, Path, str]:
    ref, prog = _reference(tmp_path, precision, dtype)
    source = first_kernel(prog, chip if chip is not None else get_chip("tpu-v6e"))
    assert "template=stacked_matmul" in source
    path = tmp_path / f"kernel_{precision}_{dtype}_{'cpu' if chip is not None else 'tpu'}.py"
    path.write_text(source)
    return ref, path, source


def _mxu_dot(source: str) -> str:
    return source[source.index("def _mxu_dot") : source.index("def _epilogue")]


def test_each_precision_gets_the_dot_the_target_computes(tmp_path):
    default = _mxu_dot(_kernel(tmp_path, "default")[2])
    assert "a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)" in default and "HIGHEST" not in default
    high = _mxu_dot(_kernel(tmp_path, "high")[2])
    assert "def split(v)" in high and "dot(ah, bh) + (dot(ah, bl) + dot(al, bh))" in high
    highest = _mxu_dot(_kernel(tmp_path, "highest")[2])
    assert "precision=lax.Precision.HIGHEST" in highest and "bfloat16" not in highest.split('"""')[-1]
    narrow = _mxu_dot(_kernel(tmp_path, "highest", dtype="bfloat16")[2])  # bf16 operands: nothing to split
    assert "astype" not in narrow and "precision" not in narrow.split('"""')[-1]
    # a run checked on the host CPU (the chip facts say so): f32 dots stay f32 whatever the precision
    assert "Numerics: the host CPU computes every f32 dot in f32" in chip_facts(CPU_CHIP)
    for precision in ("default", "high"):
        host = _mxu_dot(_kernel(tmp_path, precision, chip=CPU_CHIP)[2])
        assert "astype" not in host and "host CPU" in host


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # an interpret run at a check size (9-18 s): `make test-slow`
def test_the_kernels_numbers_are_the_algorithm_the_target_runs(tmp_path):
    """In interpret mode at the small size: each kernel against each algorithm computed in plain JAX."""
    from jax.experimental.pallas import tpu as pltpu

    ref_path = _reference(tmp_path, "default")[0]
    x, w, b = _load(ref_path).create_inputs(size={"b": 1, "t": 16, "d": 256, "f": 128})  # one block each

    def einsum(a, c):
        return jnp.einsum("btd,gdf->btgf", a, c, precision="highest")

    def split(v):
        head = v.astype(jnp.bfloat16).astype(jnp.float32)
        return head, (v - head).astype(jnp.bfloat16).astype(jnp.float32)

    (xh, xl), (wh, wl) = split(x), split(w)
    algorithms = {
        "f32": einsum(x, w) + b,
        "bf16_1x": einsum(xh, wh) + b,
        "bf16_3x": einsum(xh, wh) + (einsum(xh, wl) + einsum(xl, wh)) + b,
    }
    expect = {"default": "bf16_1x", "high": "bf16_3x", "highest": "f32"}
    with pltpu.force_tpu_interpret_mode():
        for precision, algorithm in expect.items():
            out = jax.jit(_load(_kernel(tmp_path, precision)[1]).workload)(x, w, b)
            err = {k: float(jnp.max(jnp.abs(out - v))) for k, v in algorithms.items()}
            assert err[algorithm] < 1e-5, (precision, err)  # the same algorithm: f32 summation order apart
            others = [v for k, v in err.items() if k != algorithm]
            assert min(others) > 1e-5, (precision, err)  # and told apart from the others


@pytest.mark.slow  # 20-40 s each; the default kernel's compile at full is also checked by its validation below
@pytest.mark.parametrize("precision", ["default", "highest"])
def test_the_kernel_compiles_for_v6e_at_full(precision, tmp_path):
    """Gemma 2's gating projection at its full shapes, f32: the real Mosaic compiler for v6e."""
    ref, kernel, _ = _kernel(tmp_path, precision)
    with WorkerPool(max_workers=1) as pool:
        report = Evaluator(pool, timeout_s=120).compile(str(kernel), str(ref), "tpu-v6e", "full")
    assert report.ok, report.failure


def test_a_fused_body_writes_its_f32_dot_at_the_targets_numerics():
    """body_lines (the fused, row-block and recurrence bodies): the same rule, inline."""
    f32 = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    w = jax.ShapeDtypeStruct((128, 128), jnp.float32)

    def program(precision, numerics=None):
        jaxpr = jax.make_jaxpr(lambda a, c: jnp.tanh(jnp.dot(a, c, precision=precision)))(f32, w)
        eqn = jaxpr.eqns[0]
        prog = {
            "input_names": ["a", "c"],
            "inputs": [{"shape": [8, 128], "dtype": "float32"}, {"shape": [128, 128], "dtype": "float32"}],
            "equations": [{
                "primitive": "dot_general", "inputs": ["a", "c"], "outputs": ["d"],
                "out_specs": [{"shape": [8, 128], "dtype": "float32"}],
                "params": {"dimension_numbers": "(((1,), (0,)), ((), ()))", "precision": repr(eqn.params["precision"]).replace("Precision.", "lax.Precision."), "preferred_element_type": "jnp.float32"},
            }],
        }  # fmt: skip
        return prog | ({"numerics": numerics} if numerics else {})

    default = "\n".join(body_lines(program(None)))
    assert "lax.convert_element_type(a, jnp.bfloat16), lax.convert_element_type(c, jnp.bfloat16)" in default
    assert "precision" not in default
    highest = "\n".join(body_lines(program("highest")))
    assert "precision=lax.Precision.HIGHEST" in highest and "bfloat16" not in highest
    high = body_lines(program("high"))
    assert len(high) == 5 and "d_ah" in high[-1] and "d_al" in high[-1]
    host = "\n".join(body_lines(program(None, "cpu")))
    assert "bfloat16" not in host and "precision" not in host
    np.testing.assert_equal(len(body_lines(program(None), mosaic=False)), 1)  # plain JAX: as traced


@pytest.mark.parametrize(
    "precision",
    [
        "default",
        pytest.param("high", marks=pytest.mark.slow),
        pytest.param("highest", marks=pytest.mark.slow),
    ],
)
def test_the_kernel_validates_at_the_targets_numerics(precision, tmp_path):
    """The judge's error rule at v6e's numerics (small, interpreted): each kernel passes, and its worst ratio
    against the reference's own error is stated."""
    ref, kernel, _ = _kernel(tmp_path, precision)
    with WorkerPool(max_workers=1) as pool:
        report = Evaluator(pool, timeout_s=300).validate(
            str(kernel), str(ref), "tpu-v6e", seeds=1, check_sizes=["small"]
        )
    assert report.ok, report.failure
    assert any(c.what == "compile" and c.size == "full" and c.ok for c in report.checks), report.checks
    assert report.error_summary, report
    print(precision, report.error_summary)


def test_a_one_pass_kernel_fails_a_reference_that_asks_for_highest(tmp_path):
    """The adversary the model must never write: the DEFAULT kernel (one bf16 pass) against HIGHEST."""
    _, kernel, _ = _kernel(tmp_path, "default")
    ref = _reference(tmp_path, "highest")[0]
    with WorkerPool(max_workers=1) as pool:
        report = Evaluator(pool, timeout_s=300).validate(
            str(kernel), str(ref), "tpu-v6e", seeds=1, check_sizes=["small"]
        )
    assert not report.ok and report.failure.kind == "output_mismatch", report.failure
