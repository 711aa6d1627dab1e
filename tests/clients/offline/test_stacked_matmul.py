"""A projection by a stacked weight is tiled on weight, rows, columns and K: no operand is held whole.

Library models write their MLP projections as einsums over stacked weights: Gemma 2's GeGLU gating
(`BTD,2DF->BT2F`) and recurrentgemma's MLP (`2DF,BTD->2FBT`, a transpose, a bias per weight). The row-tiled
fallback held the whole weight in VMEM (Gemma 2 at full: 69.5 MB asked, 64 MiB limit) or the whole problem
in one step (Griffin: a compile past the 300 s timeout). The adversary: an epilogue the [rows, columns]
blocks cannot see whole (a reduction over the columns, a value per weight with none per column in the
[M, G*N] view, the activation read again) must not be taken for a stacked projection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_paths import REFS

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.templates.stacked_matmul import recognise
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.program import describe

# Gemma 2's region shapes at full (tests/refs/gemma2_model.py's config: batch 2, 1024 tokens, 1024 wide,
# a 4096 hidden), f32 as the model runs
REF = """
import jax
import jax.numpy as jnp
from jax import lax

SIZES = {"full": {"b": 2, "t": 1024, "d": 1024, "f": 4096}, "small": {"b": 1, "t": 64, "d": 128, "f": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    k = jax.random.split(key, 3)
    x = jax.random.normal(k[0], (s["b"], s["t"], s["d"]))
    w = jax.random.normal(k[1], (2, s["d"], s["f"])) * 0.09
    b = jax.random.normal(k[2], BIAS)
    return x, w, b


def workload(x, w, b):
    return BODY
"""
GEGLU = ("(2, s['f'])", "jnp.einsum('btd,gdf->btgf', x, w) + b")  # b: one bias per weight and column
# recurrentgemma's form: the weight on the dot's left, then a transpose to [2, B, T, F] and a bias per weight
GRIFFIN = (
    "(2, 1, 1, s['f'])",
    "lax.transpose(lax.dot_general(w, x, (((1,), (2,)), ((), ()))), (0, 2, 3, 1)) + b",
)
COLUMN_SUM = ("(2, s['f'])", "jnp.sum(jnp.einsum('btd,gdf->btgf', x, w) + b, axis=-1)")
PER_WEIGHT = ("(2, 1)", "jnp.einsum('btd,gdf->btgf', x, w) + b")
X_AGAIN = ("(2, s['f'])", "jnp.einsum('btd,gdf->btgf', x, w) + b + jnp.sum(x)")


def program(tmp_path: Path, case: tuple[str, str]) -> tuple[Path, dict]:
    path = tmp_path / "stacked_ref.py"
    path.write_text(REF.replace("BIAS", case[0]).replace("BODY", case[1]))
    return path, describe(str(path)).model_dump(mode="json")


def test_gemma_and_griffin_projections_are_recognised_with_their_layouts(tmp_path):
    g = recognise(program(tmp_path, GEGLU)[1])
    assert g is not None and (g["x"], g["w"], g["g_first"], g["w_nk"]) == ("x0", "x1", False, False)
    assert [(o["input"], o["dims"]) for o in g["others"]] == [("x2", (2, 3))]  # the bias, widened
    r = recognise(program(tmp_path, GRIFFIN)[1])
    assert r is not None and (r["x"], r["w"], r["g_first"]) == ("x0", "x1", True)
    assert [(o["input"], o["dims"]) for o in r["others"]] == [("x2", None)]


@pytest.mark.parametrize(
    "case", [COLUMN_SUM, PER_WEIGHT, X_AGAIN], ids=["column_sum", "per_weight", "x_again"]
)
def test_an_epilogue_the_blocks_cannot_see_whole_is_not_taken_for_a_projection(case, tmp_path):
    from maxkernel.clients.offline.dims import Symbolic
    from maxkernel.clients.offline.templates.stacked_matmul import build

    prog = program(tmp_path, case)[1]
    assert build(prog, Symbolic(prog)) is None


def test_the_first_gemma_geglu_kernel_fits_vmem_and_compiles_at_full(tmp_path):
    """Gemma 2's gating projection at its full shapes: the real Mosaic compiler for v5e (a few seconds)."""
    ref, prog = program(tmp_path, GEGLU)
    source = first_kernel(prog, get_chip("tpu-v5e"))
    assert "template=stacked_matmul" in source
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    with WorkerPool(max_workers=1) as pool:
        report = Evaluator(pool, timeout_s=120).compile(str(kernel), str(ref), "tpu-v5e", "full")
    assert report.ok, report.failure


@pytest.mark.slow  # Gemma 2 traced and its region extracted, then checked by default; two twins interpreted
def test_gemma2s_geglu_region_validates_by_default_and_partial_blocks_of_both_layouts_validate(tmp_path):
    pytest.importorskip("gemma", reason="gemma is installed by make test-slow (the Makefile's models stamp)")
    from maxkernel.tpu_tools.model.extract import extract_region

    _, text = extract_region(str(REFS / "gemma2_model.py"), "Transformer.layer_{0-3}.mlp.Einsum_0")
    ref = tmp_path / "einsum_0.py"
    ref.write_text(text)
    source = first_kernel(describe(str(ref)).model_dump(mode="json"), get_chip("tpu-v5e"))
    assert "template=stacked_matmul" in source
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    # the twins with small blocks, so that rows, columns and K each end in a partial block ([M, G*N]: the
    # column block halves to 128, which divides N = 384)
    partial = InputCase(name="partial", sizes={"b": 1, "t": 100, "d": 200, "f": 384})
    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool, timeout_s=600)
        report = ev.validate(str(kernel), str(ref), "tpu-v5e", "full")  # default: small, derived, the probe
        assert report.ok, report.failure
        assert any(c.what == "compile" and c.size == "full" and c.ok for c in report.checks), report.checks
        for case in (GEGLU, GRIFFIN):
            twin, prog = program(tmp_path, case)
            # checked on the host CPU: written for its numerics (f32 dots in f32), as the Auto loop does for cpu
            source = first_kernel(prog, {**get_chip("tpu-v6e").model_dump(), "numerics": "cpu"})
            for name, block in (("BLOCK_ROWS", 64), ("BLOCK_COLS", 256), ("BLOCK_K", 128)):
                line = next(x for x in source.splitlines() if x.startswith(f"{name} = "))
                source = source.replace(line, f"{name} = {block}")
            kernel.write_text(source)
            report = ev.validate(str(kernel), str(twin), "cpu", "small", seeds=1, case=partial)
            assert report.ok, (case, report.failure)
