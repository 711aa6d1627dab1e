"""A batched matmul program is tiled on M, N and K: no operand is held whole.

The row-tiled matmul class held each group's whole weight (14p_Ragged_Dot at full: VMEM exhausted).
The adversary: a program with more than the dot (a bias add) or whose batch axes are not leading must
not be taken for a plain batched matmul; the kernel would drop the bias or mix up the groups.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.templates.batched_matmul import recognise
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.program import describe

CHIP = get_chip("tpu-v6e")
TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
BMM = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"g": 4, "m": 2048, "k": 4096, "n": 8192}, "small": {"g": 2, "m": 64, "k": 256, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (s["g"], s["m"], s["k"])).astype(jnp.bfloat16)
    w = (jax.random.normal(k2, WSHAPE) * 0.05).astype(jnp.bfloat16)
    return x, w


def workload(x, w):
    return BODY
"""
PLAIN = ('(s["g"], s["k"], s["n"])', 'jnp.einsum("gmk,gkn->gmn", x, w)')
BIAS = ('(s["g"], s["k"], s["n"])', 'jnp.einsum("gmk,gkn->gmn", x, w) + 1.0')
TRAILING = ('(s["k"], s["n"], s["g"])', 'jnp.einsum("gmk,kng->gmn", x, w)')


def program(tmp_path: Path, case: tuple[str, str]) -> tuple[Path, dict]:
    path = tmp_path / "bmm_ref.py"
    path.write_text(BMM.replace("WSHAPE", case[0]).replace("BODY", case[1]))
    return path, describe(str(path)).model_dump(mode="json")


def test_a_batched_matmul_is_recognised_and_nothing_more(tmp_path):
    r = recognise(describe(str(TASKS / "14p_Ragged_Dot" / "__init__.py")).model_dump(mode="json"))
    assert r == {"lhs": "x0", "rhs": "x1", "nb": 1, "rhs_nk": False, "out_dtype": "bfloat16"}
    assert recognise(program(tmp_path, BIAS)[1]) is None
    assert recognise(program(tmp_path, TRAILING)[1]) is None


@pytest.mark.slow
def test_one_source_validates_with_partial_m_n_k_blocks_and_compiles_at_full(tmp_path):
    ref, prog = program(tmp_path, PLAIN)
    source = first_kernel(prog, CHIP)
    assert "template=batched_matmul" in source
    for name in (
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
    ):  # 512 blocks, so that the case below ends each in a partial one
        line = next(x for x in source.splitlines() if x.startswith(f"{name} = "))
        source = source.replace(line, f"{name} = 512")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    case = {"g": 2, "m": 520, "k": 640, "n": 640}  # every axis ends in a partial block of 512
    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool, timeout_s=600)
        for c in (None, InputCase(name="partial", sizes=case)):
            report = ev.validate(str(kernel), str(ref), "cpu", "small", seeds=1, case=c)
            assert report.ok, report.failure
        full = ev.compile(str(kernel), str(ref), "tpu-v6e", "full")
        assert full.ok, full.failure


def test_14p_first_blocks_reach_the_ridge_and_keep_k_steps_a_check_size_repeats():
    """14p at full (8 x [1024, 4096] @ [4096, 14336]): the whole K in one k step, so the activations' block
    stays put across the n blocks (read once) and no accumulator is kept: llo at full, tpu-v6e, 1093.8 us
    (XLA 1204, the expert 1228) where 1024 x 2048 x 1024 blocks, re-reading the activations 7 times, took
    1185.4. k blocks of 2048 are refused: the target's two k steps are one at every check size (grown: K
    reaches 2048 within the judge's element budget), so the accumulate-across-k path never runs there and
    the kernel is shape_specialized (the full suite saw it, and its debugger fell to 128 blocks: 0.03x)."""
    from maxkernel.clients.offline.dims import Symbolic
    from maxkernel.clients.offline.templates.batched_matmul import WIDE, build, k_checkable

    prog = describe(str(TASKS / "14p_Ragged_Dot" / "__init__.py")).model_dump(mode="json")
    t = build(prog, Symbolic(prog))
    assert t.initial == {"block_m": 1024, "block_n": 1024, "block_k": 4096}
    assert t.vmem_bytes(t.initial, {}) == 40 * 2**20  # blocks + accumulator
    streamed = {"block_m": 1024, "block_n": 2048, "block_k": 1024}  # the activations read 7 times
    assert t.cost_us(t.initial, {}) < t.cost_us(streamed, {})
    narrower = streamed | {"block_n": 1024}  # the 1024-cube the template had: 0.92x the expert
    assert t.cost_us(streamed, {}) < t.cost_us(narrower, {})
    assert not k_checkable(2048, 4096) and k_checkable(1024, 4096) and k_checkable(4096, 4096)
    assert t.problems({"block_m": 4096, "block_n": 4096, "block_k": 8192}, {}) == [
        "block_m=4096 is not one of [128, 256, 512, 1024, 2048]",
        f"block_n=4096 is not one of {list(WIDE)}",
        f"block_k=8192 is not one of {[*WIDE, 4096]}",
    ]


@pytest.mark.slow  # an interpret run at a check size (9-18 s): `make test-slow`
def test_one_and_several_k_steps_match_the_einsum(tmp_path):
    """bk 512 over K 320 is one k step (no accumulator), 128 three (one middle step, the last masked past K);
    the middle step's product dropped must fail."""
    import importlib.util

    import jax
    import jax.numpy as jnp
    import numpy as np

    from maxkernel.clients.offline.dims import Symbolic
    from maxkernel.clients.offline.templates.batched_matmul import build
    from maxkernel.tpu_tools.hardware import execution

    _, prog = program(tmp_path, PLAIN)
    t = build(prog, Symbolic(prog))
    kx, kw = jax.random.split(jax.random.key(1))
    x = jax.random.normal(kx, (2, 64, 320)).astype(jnp.bfloat16)
    w = (0.05 * jax.random.normal(kw, (2, 320, 256))).astype(jnp.bfloat16)
    want = np.asarray(jnp.einsum("gmk,gkn->gmn", x, w, preferred_element_type=jnp.float32), np.float32)

    def run(name: str, source: str) -> np.ndarray:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with execution.tpu_interpret_mode():
            return np.asarray(jax.jit(mod.workload)(x, w), np.float32)

    for bk in (512, 128):
        source = t.render({"block_m": 128, "block_n": 128, "block_k": bk}, "program")
        np.testing.assert_allclose(run(f"k{bk}", source), want, atol=2e-2, rtol=2e-2, err_msg=f"bk={bk}")
    skipped = source.replace("jnp.zeros_like(acc), acc) + _part()", "_part(), acc)")
    assert skipped != source and np.abs(run("skipped", skipped) - want).max() > 0.05
