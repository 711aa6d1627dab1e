"""Scalar (0-d) inputs reach the offline model's kernels through SMEM (templates/scalars.py).

The references in tests/refs/scalar_inputs carry a traced step count, temperature or valid length at
production shapes. Their first kernels pass each scalar as a (1,) SMEM array read as `ref[0]`; a 0-d pow
(an optimizer's bias correction) runs on a (1, 1) vector, since Mosaic's scalar unit has no powf. The slow
tests compile each first kernel at full for v6e and run its smallest-block render in TPU interpret mode
against the reference at a small size, and meet the kernel that bakes the scalar in as a constant.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates import scalars
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.emit import body_lines
from tests.clients.offline._modules import program_of, written

REFS = Path(__file__).resolve().parents[2] / "refs" / "scalar_inputs"
# reference -> (its template, the scalar's name where pallas_call is given it, the scalar's dtype)
CASES = {
    "adamw_step": ("elementwise", "x4", "int32"),
    "softmax_temperature": ("rowwise", "x1", "float32"),
    "masked_softmax_length": ("rowwise", "x1", "int32"),
    "cross_entropy_temperature": ("cross_entropy", "scale", "float32"),  # the logits' scale
    "scaled_projection": ("matmul", "x2", "float32"),  # the k-tiled matmul's epilogue operand
    "attention_temperature": ("flash_program", "x3", "float32"),  # a scale in the flash score chain
    "sampling_probs": ("matmul", "x2", "float32"),  # a softmax epilogue over whole rows
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_scalar_input_is_one_smem_word_read_as_ref0(name):
    kind, arg, dtype = CASES[name]
    program = program_of(REFS / f"{name}_reference.py")
    assert [s["shape"] for s in program["inputs"]][-1] == [] and program["inputs"][-1]["dtype"] == dtype
    template, target, _ = program_template(program)
    assert (template.name, target) == (kind, "full")
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert f"{arg}.reshape(1)" in source and f"{arg}_ref[0]" in source
    assert source.count("pl.BlockSpec(memory_space=pltpu.SMEM)") == 1
    assert f"({dtype}[])" in source  # the comment beside it names the scalar


def test_cross_entropy_refuses_logits_scaled_by_a_value_it_would_drop(tmp_path):
    """Logits divided by a computed value (not a 0-d input, not a constant) are not its program: before the
    scale was read, the template took such a program and dropped the divide (a kernel validation failed)."""
    src = (REFS / "cross_entropy_temperature_reference.py").read_text()
    src = src.replace("/ temperature", "/ (temperature * temperature)")
    ref = tmp_path / "ce_squared_temperature_reference.py"
    ref.write_text(src)
    template, _, _ = program_template(program_of(ref))
    assert template.name != "cross_entropy"


def test_a_scalar_pow_runs_on_a_one_by_one_vector_and_an_array_pow_as_traced():
    """Mosaic cannot legalize math.powf on an f32 scalar (libtpu compile-only v6e); it lowers on vectors."""
    program = program_of(REFS / "adamw_step_reference.py")
    pows = [line for line in body_lines(program) if "lax.pow(" in line]
    assert len(pows) == 2 and all("jnp.full((1, 1), " in p and p.endswith("[0, 0]") for p in pows)
    plain = [line for line in body_lines(program, mosaic=False) if "lax.pow(" in line]
    assert len(plain) == 2 and not any("jnp.full" in p for p in plain)


def test_a_narrow_scalar_travels_widened_and_a_64_bit_one_is_refused():
    assert scalars.arg("s", {"shape": [], "dtype": "bfloat16"}) == "s.reshape(1).astype(jnp.float32)"
    assert scalars.load("s_ref", {"shape": [], "dtype": "bfloat16"}) == "s_ref[0].astype(jnp.bfloat16)"
    assert scalars.arg("flag", {"shape": [], "dtype": "bool"}) == "flag.reshape(1).astype(jnp.int32)"
    assert scalars.load("flag_ref", {"shape": [], "dtype": "bool"}) == "(flag_ref[0] != 0)"
    assert scalars.arg("n", {"shape": [], "dtype": "int32"}) == "n.reshape(1)"
    with pytest.raises(ValueError, match="float64 scalar input has no 32-bit SMEM word"):
        scalars.arg("d", {"shape": [], "dtype": "float64"})


def _smallest(template) -> dict:
    return {k: v[0] for k, v in template.tunables.items()}


def _interpret(mod, inputs):
    with execution.tpu_interpret_mode():
        return jax.jit(mod.workload)(*inputs)


def _compile_full(tmp_path: Path, source: str, ref_mod, target: str = "tpu-v6e") -> None:
    t = parse_target(target)
    sharding = execution.aot_sharding(t)
    full = [
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
        for x in jax.eval_shape(ref_mod.create_inputs)
    ]
    kernel = written(tmp_path / f"first_{target.replace('-', '_')}.py", source)
    with trace_as_target(t):
        text = jax.jit(kernel.workload).lower(*full).compile().as_text()
    assert "tpu_custom_call" in text or "custom-call" in text


def _close(got, want, ref_mod) -> bool:
    atol, rtol = ref_mod.CONFIG["atol"], ref_mod.CONFIG["rtol"]
    return all(
        g.shape == w.shape
        and g.dtype == w.dtype
        and np.allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=atol, rtol=rtol)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    )


@pytest.mark.slow  # a compile at full and three interpret runs per reference (~10-20 s each)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_kernel_compiles_at_full_and_follows_the_scalar_across_seeds(tmp_path, name):
    _, arg, _ = CASES[name]
    ref = REFS / f"{name}_reference.py"
    program = program_of(ref)
    ref_mod = written(tmp_path / f"{name}_ref.py", ref.read_text())
    _compile_full(tmp_path, first_kernel(program, get_chip("tpu-v6e")), ref_mod)
    template, _, _ = program_template(program)
    source = template.render(_smallest(template), "program")
    small = written(tmp_path / f"{name}_small.py", source)
    seeds = [ref_mod.create_inputs(size="small", key=jax.random.key(s)) for s in (3, 4)]
    assert float(seeds[0][-1]) != float(seeds[1][-1]), "the seeds must draw different scalars"
    for inputs in seeds:
        assert _close(_interpret(small, inputs), ref_mod.workload(*inputs), ref_mod)
    # the kernel that would fool a check whose seeds share one scalar: seed 3's value baked in
    baked_value = seeds[0][-1]
    baked = source.replace(f"{arg}_ref[0]", f"jnp.asarray({baked_value.item()!r}, jnp.{baked_value.dtype})")
    assert baked != source
    mod = written(tmp_path / f"{name}_baked.py", baked)
    assert _close(_interpret(mod, seeds[0]), ref_mod.workload(*seeds[0]), ref_mod)
    assert not _close(_interpret(mod, seeds[1]), ref_mod.workload(*seeds[1]), ref_mod)


@pytest.mark.slow  # a compile at full and two interpret runs at small
def test_the_column_tiled_matmul_reads_a_scalar_in_its_row_epilogue(tmp_path):
    """matmul_rows (N tiled, the row softmax as per-block partials) takes the temperature from SMEM too."""
    from maxkernel.clients.offline.dims import Symbolic, program_at
    from maxkernel.clients.offline.rows import analyse
    from maxkernel.clients.offline.templates import matmul_rows

    ref = REFS / "sampling_probs_reference.py"
    program = program_of(ref)
    sym = Symbolic(program)
    template = matmul_rows.build(program, analyse(program_at(program, sym.target)), sym)
    assert template is not None
    ref_mod = written(tmp_path / "sampling_ref.py", ref.read_text())
    first = template.render(template.initial, "program")
    assert "x2_ref[0]" in first and "x2.reshape(1)" in first
    _compile_full(tmp_path, first, ref_mod)
    small = written(tmp_path / "sampling_small.py", template.render(_smallest(template), "program"))
    for s in (5, 6):
        inputs = ref_mod.create_inputs(size="small", key=jax.random.key(s))
        assert _close(_interpret(small, inputs), ref_mod.workload(*inputs), ref_mod)


@pytest.mark.slow  # two interpret runs and a compile at a small size
def test_a_bf16_scalar_travels_as_f32_and_is_narrowed_exactly_in_the_kernel(tmp_path):
    ref_src = """
import jax
import jax.numpy as jnp

CONFIG = {"name": "bf16_scale", "atol": 1e-2, "rtol": 1e-2}
SIZES = {"full": {"rows": 256, "cols": 1024}, "small": {"rows": 16, "cols": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, ks = jax.random.split(jax.random.key(0) if key is None else key)
    x = jax.random.normal(kx, (d["rows"], d["cols"]), jnp.bfloat16)
    return x, jax.random.uniform(ks, (), jnp.float32, 0.5, 4.0).astype(jnp.bfloat16)


def workload(x, scale):
    return x * scale + jnp.sum(x, axis=-1, keepdims=True)
"""
    ref = tmp_path / "bf16_scale_reference.py"
    ref.write_text(ref_src)
    program = program_of(ref)
    template, _, _ = program_template(program)
    source = template.render(_smallest(template), "program")
    assert "x1.reshape(1).astype(jnp.float32)" in source and "x1_ref[0].astype(jnp.bfloat16)" in source
    ref_mod = written(tmp_path / "bf16_scale_ref.py", ref_src)
    _compile_full(tmp_path, first_kernel(program, get_chip("tpu-v6e")), ref_mod)
    small = written(tmp_path / "bf16_small.py", source)
    for s in (1, 2):
        inputs = ref_mod.create_inputs(size="small", key=jax.random.key(s))
        assert inputs[1].dtype == jnp.bfloat16
        assert _close(_interpret(small, inputs), ref_mod.workload(*inputs), ref_mod)
