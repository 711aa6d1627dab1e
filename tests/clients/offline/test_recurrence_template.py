"""The recurrence template: a lax.scan over time with an elementwise body, written as one Pallas kernel.

A gated EMA (carry from an input, a [W] decay broadcast over [B, T, W], a gate after the scan) is the
family's synthetic member: its kernel runs in TPU interpret mode across several T chunks (the carry kept
in VMEM between them) and W blocks against the reference, and the first kernel the offline model writes
compiles at the production size with the real Mosaic compiler. Scans it cannot write are refused with
the reason. Griffin's RG-LRU region (recurrentgemma, unmodified) is the slow test.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.clients.offline.classify import classify
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import NoTemplateFits, program_template
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

EMA = """
import jax
import jax.numpy as jnp
from jax import lax

CONFIG = {"name": "gated_ema", "atol": 1e-4, "rtol": 1e-3}
SIZES = {"full": {"b": 2, "t": 512, "w": 512}, "small": {"b": 1, "t": 32, "w": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0) if key is None else key
    k1, k2, k3, k4 = jax.random.split(key, 4)
    x = jax.random.normal(k1, (s["b"], s["t"], s["w"]), jnp.float32)
    decay = jax.random.normal(k2, (s["w"],), jnp.float32)
    gate = jax.random.normal(k3, (s["b"], s["t"], s["w"]), jnp.float32)
    h0 = jax.random.normal(k4, (s["b"], s["w"]), jnp.float32)
    return x, decay, gate, h0


def workload(x, decay, gate, h0):
    a = jax.nn.sigmoid(decay)[None, None, :] * jnp.ones_like(x)
    b = (1.0 - a) * x

    def step(h, ab):
        a_t, b_t = ab
        h = a_t * h + b_t
        return h, h

    _, ys = lax.scan(step, h0, (jnp.swapaxes(a, 0, 1), jnp.swapaxes(b, 0, 1)), reverse=REVERSE)
    return jnp.swapaxes(ys, 0, 1) * jax.nn.silu(gate)
"""

TWO_CARRIES = """
import jax
import jax.numpy as jnp
from jax import lax

SIZES = {"full": {"t": 256, "w": 256}, "small": {"t": 16, "w": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    return (jax.random.normal(jax.random.key(0), (s["t"], s["w"]), jnp.float32),)


def workload(x):
    def step(c, x_t):
        h, n = c
        return (0.9 * h + x_t, n + 1.0), h

    _, ys = lax.scan(step, (jnp.zeros(x.shape[1:]), jnp.zeros(x.shape[1:])), x)
    return ys
"""


CONST = """
import jax
import jax.numpy as jnp
from jax import lax

SIZES = {"full": {"b": 4, "t": 512, "w": 256}, "small": {"b": 2, "t": 32, "w": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    k1, k2 = jax.random.split(jax.random.key(0) if key is None else key)
    x = jax.random.normal(k1, (s["b"], s["t"], s["w"]), jnp.float32)
    return x, jax.random.uniform(k2, (s["b"], s["w"]), jnp.float32, 0.5, 0.99)


def workload(x, lam):
    def step(h, x_t):  # lam is closed over: a loop-invariant operand of the scan
        h = lam * h + jnp.tanh(x_t)
        return h, h

    _, ys = lax.scan(step, jnp.zeros_like(lam), jnp.swapaxes(x, 0, 1))
    return jnp.swapaxes(ys, 0, 1)
"""


HEADS = """
import jax
import jax.numpy as jnp
from jax import lax

SIZES = {"full": {"b": 2, "h": 4, "t": 512, "d": 256}, "small": {"b": 1, "h": 2, "t": 32, "d": 128}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    k1, k2 = jax.random.split(jax.random.key(0) if key is None else key)
    return (
        jax.random.normal(k1, (s["b"], s["h"], s["t"], s["d"]), jnp.float32),
        jax.random.normal(k2, (s["h"], s["d"]), jnp.float32),
    )


def workload(x, decay):  # a per-head EMA over [B, H, T, D] with a [H, D] decay
    a = jnp.broadcast_to(jax.nn.sigmoid(decay)[None, :, None, :], x.shape)

    def step(h, ab):
        h = ab[0] * h + ab[1]
        return h, h

    h0 = jnp.zeros((x.shape[0], x.shape[1], x.shape[3]), jnp.float32)
    _, ys = lax.scan(step, h0, (jnp.moveaxis(a, 2, 0), jnp.moveaxis((1.0 - a) * x, 2, 0)))
    return jnp.moveaxis(ys, 0, 2)
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}_ref.py"
    path.write_text(text)
    return path


@pytest.mark.slow  # a compile at full or an interpret run at a check size: `make test-slow`
def test_a_gated_ema_gets_a_recurrence_kernel_right_across_chunks_that_compiles_at_full(tmp_path):
    ref = _write(tmp_path, "ema", EMA.replace("REVERSE", "False"))
    program = describe(str(ref)).model_dump(mode="json")
    assert classify(program).kind == "recurrence"
    source = first_kernel(program, get_chip("tpu-v5e"))
    assert "template=recurrence" in source and "lax.scan(" not in source and "fori_loop" in source
    assert '"parallel", "parallel", "arbitrary"' in source  # T chunks last, carried in order
    # small blocks: 4 T chunks (the carry crosses them), 2 W blocks, 2 batch rows (each from its own h0)
    template, _, _ = program_template(program)
    mod = written(tmp_path / "small_blocks.py", template.render({"block_t": 8, "block_w": 128}, "program"))
    ref_mod = written(tmp_path / "ema_copy.py", ref.read_text())
    inputs = ref_mod.create_inputs(size={"b": 2, "t": 32, "w": 256}, key=jax.random.key(3))
    want = ref_mod.workload(*inputs)
    with execution.tpu_interpret_mode():
        got = jax.jit(mod.workload)(*inputs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)
    # a kernel that restarted the carry at each chunk would be off from row 8 on: the check sees it
    restart = source.replace("pl.program_id(2) == 0", "True")
    assert restart != source
    bad = written(tmp_path / "restart.py", restart.replace("BLOCK_T = ", "BLOCK_T = 8  #"))
    with execution.tpu_interpret_mode():
        wrong = jax.jit(bad.workload)(*inputs)
    assert not np.allclose(np.asarray(wrong)[:, 8:], np.asarray(want)[:, 8:], atol=1e-3)
    # the offline model's first kernel, at the production size, through the real Mosaic compiler
    target = parse_target("tpu-v5e")
    sharding = execution.aot_sharding(target)
    full = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in ref_mod.create_inputs()]
    first = written(tmp_path / "first.py", source)
    with trace_as_target(target):
        compiled = jax.jit(first.workload).lower(*full).compile()
    assert compiled is not None


def test_a_carry_shaped_input_the_body_closes_over_is_read_per_batch_row(tmp_path):
    ref = _write(tmp_path, "const", CONST)
    template, _, _ = program_template(describe(str(ref)).model_dump(mode="json"))
    source = template.render({"block_t": 8, "block_w": 128}, "program")
    assert "# loop-invariant in the body" in source
    mod, ref_mod = written(tmp_path / "k.py", source), written(tmp_path / "r.py", CONST)
    inputs = ref_mod.create_inputs(size={"b": 2, "t": 16, "w": 128}, key=jax.random.key(1))
    with execution.tpu_interpret_mode():
        got = jax.jit(mod.workload)(*inputs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref_mod.workload(*inputs)), atol=1e-5, rtol=1e-5)


def test_two_batch_axes_tile_and_an_input_on_two_of_them_is_read_per_head(tmp_path):
    template, _, _ = program_template(describe(str(_write(tmp_path, "heads", HEADS))).model_dump(mode="json"))
    source = template.render({"block_t": 8, "block_w": 128}, "program")
    assert '"parallel", "parallel", "parallel", "arbitrary"' in source
    assert "x1_ref[pl.ds(r1, b1), :]" in source  # [H, D]: the head is on sublanes, sliced at this step's head
    mod, ref_mod = written(tmp_path / "k.py", source), written(tmp_path / "r.py", HEADS)
    inputs = ref_mod.create_inputs(size={"b": 1, "h": 2, "t": 16, "d": 128}, key=jax.random.key(2))
    with execution.tpu_interpret_mode():
        got = jax.jit(mod.workload)(*inputs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref_mod.workload(*inputs)), atol=1e-5, rtol=1e-5)


def test_scans_the_template_cannot_write_are_refused_with_the_reason(tmp_path):
    reverse = describe(str(_write(tmp_path, "rev", EMA.replace("REVERSE", "True")))).model_dump(mode="json")
    with pytest.raises(NoTemplateFits, match="a reverse scan"):
        program_template(reverse)
    two = describe(str(_write(tmp_path, "two", TWO_CARRIES))).model_dump(mode="json")
    with pytest.raises(NoTemplateFits, match="2 carries"):
        program_template(two)


@pytest.mark.slow  # the Griffin region is extracted from the library model, then judged with default flags
def test_griffins_rg_lru_region_gets_a_kernel_that_validates_and_compiles_at_full(tmp_path):
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.model.extract import extract_region, write_new
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    model = Path(__file__).resolve().parents[2] / "refs" / "griffin_model.py"
    _, text = extract_region(str(model), "Griffin.blocks.{0,1}.recurrent_block.rg_lru.recurrence")
    ref = write_new(tmp_path / "rglru.py", text)
    source = first_kernel(describe(str(ref)).model_dump(mode="json"), get_chip("tpu-v5e"))
    assert "template=recurrence" in source
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool, timeout_s=600)
        assert ev.compile(str(kernel), str(ref), "tpu-v5e", "full").ok
        v = ev.validate(str(kernel), str(ref), "tpu-v5e", None, seeds=1)
        assert v.ok, (v.failure, v.target_program)
