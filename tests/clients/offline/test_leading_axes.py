"""[B, S, K] x [K, N] programs (Flax's nn.Dense, any x @ w on a 3-D x) get the 2-D matmul templates.

The program's 2-D twin merges the leading axes into rows; the kernel is wrapped to take the original
shapes. Anything whose equations do not read the same with the rows merged is left as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.leading import collapse
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe

CHIP = get_chip("tpu-v6e")
DENSE = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"b": 4, "s": 2048, "k": 8192, "n": 2048}, "small": {"b": 1, "s": 128, "k": 512, "n": 256}}
CONFIG = {"name": "dense3d", "dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size] if isinstance(size, str) else size
    ks = jax.random.split(jax.random.key(0) if key is None else key, 4)
    x = jax.random.normal(ks[0], (d["b"], d["s"], d["k"]), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(ks[1], (d["k"], d["n"]), jnp.float32) * d["k"] ** -0.5).astype(jnp.bfloat16)
    bias = jax.random.normal(ks[2], (d["n"],), jnp.float32).astype(jnp.bfloat16)
    res = jax.random.normal(ks[3], (d["b"], d["s"], d["n"]), jnp.float32).astype(jnp.bfloat16)
    return x, w, bias, res


def workload(x, w, bias, res):
    return EPILOGUE
"""
PLAIN = "res + jax.nn.gelu(jnp.dot(x, w) + bias.reshape(1, 1, -1))"
MIXES_ROWS = "res + jnp.sum(jnp.dot(x, w), axis=1, keepdims=True)"  # a sum over the sequence: not a row op


def _program(tmp_path: Path, epilogue: str) -> dict:
    path = tmp_path / "dense3d.py"
    path.write_text(DENSE.replace("EPILOGUE", epilogue))
    return describe(str(path)).model_dump(mode="json")


def test_a_3d_dense_gets_the_k_tiled_matmul_on_merged_rows(tmp_path):
    program = _program(tmp_path, PLAIN)
    twin = collapse(program)
    assert twin is not None and twin["collapsed"]["inputs"] == ["x0", "x3"]
    assert [s["shape"] for s in twin["inputs"]] == [[128, 512], [512, 256], [256], [128, 256]]
    assert twin["variants"]["full"]["inputs"][0]["shape"] == [8192, 8192]
    source = first_kernel(program, CHIP)
    assert "template=matmul" in source and "block_k=" in source  # k-tiled, not one batch row per step
    assert "def _workload_rows(" in source and "lead = x0.shape[:-1]" in source
    assert "N_AXES = {(1, 1), (2, 0), (3, 1)}" in source  # columns blocked: weight, (1, N) bias, residual


def test_a_program_that_mixes_the_leading_axes_is_left_as_it_is(tmp_path):
    assert collapse(_program(tmp_path, MIXES_ROWS)) is None


def _blocks(text: str, **values: int) -> str:
    for name, value in values.items():
        line = next(x for x in text.splitlines() if x.startswith(f"{name} = "))
        text = text.replace(line, f"{name} = {value}")
    return text


@pytest.mark.slow  # interpret-mode validations at small and derived, and a compile at the production size
def test_the_wrapped_kernel_validates_with_blocked_columns_and_a_dropped_bias_column_fails(tmp_path):
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    ref = tmp_path / "dense3d.py"
    ref.write_text(DENSE.replace("EPILOGUE", PLAIN))
    text = first_kernel(describe(str(ref)).model_dump(mode="json"), CHIP)
    kernel, small, bad = tmp_path / "kernel.py", tmp_path / "small_blocks.py", tmp_path / "bad.py"
    kernel.write_text(text)
    # at the check sizes N is 256 and 384: 128-column blocks make two and three, the last one partial
    small.write_text(_blocks(text, BLOCK_ROWS=64, BLOCK_COLS=128, BLOCK_K=256))
    assert "    def x2_map(i, j, k):\n        return j," in small.read_text()
    bad.write_text(
        small.read_text().replace(
            "    def x2_map(i, j, k):\n        return j,", "    def x2_map(i, j, k):\n        return 0,"
        )
    )
    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool, timeout_s=600)
        assert ev.compile(str(kernel), str(ref), "tpu-v6e", "full").ok
        for path in (kernel, small):
            report = ev.validate(str(path), str(ref), "cpu", None, seeds=1)
            assert report.ok, report.failure.summary
        wrong = ev.validate(str(bad), str(ref), "cpu", None, seeds=1)  # every column block reads bias block 0
        assert not wrong.ok and wrong.failure.kind in ("output_mismatch", "shape_specialized"), wrong.failure
