"""The offline model's pooling, convolution, scan and arg-reduction kernels (templates/op_families.py).

For each family the first kernel the model writes for a reference in tests/refs/ops (KernelBench-like
production sizes) compiles at that size with the real Mosaic compiler, and the same template rendered
with its smallest blocks (several blocks along the walked axis, a halo that crosses blocks) runs in TPU
interpret mode at a small size and matches the reference. Each family also meets the kernel that would
fool a weaker check: a scan that forgets its carry, a window that never reads its halo. The slow test
runs every reference in the folder the same way.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.op_dispatch import build as build_op_family
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.judged.target_trace import trace_as_target
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

REFS = Path(__file__).resolve().parents[2] / "refs" / "ops"
FAMILY = {  # reference -> (template, a size small enough for interpret mode, blocks that make several steps)
    "cumsum_reverse": ("scan", {"b": 2, "n": 40, "d": 256}, {}),
    "argmax": ("arg_reduce", {"b": 2, "n": 40, "d": 256}, {}),
    "maxpool2d": ("pool", {"n": 1, "c": 8, "h": 20, "w": 20}, {"block_rows": 4}),  # 3 steps, halo 1 row
    "conv2d_grouped": ("conv", {"n": 1, "c": 8, "o": 16, "h": 12, "w": 12}, {"block_rows": 2}),
}


def _smallest(template, **blocks) -> dict:
    """The template's smallest legal blocks (many grid steps), or the given ones."""
    return {k: blocks.get(k, v[0]) for k, v in template.tunables.items()}


def _interpret(mod, inputs):
    with execution.tpu_interpret_mode():
        return jax.jit(mod.workload)(*inputs)


def _compile_full(tmp_path: Path, source: str, ref_mod, target: str) -> None:
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


def _check(tmp_path: Path, name: str, size: dict, targets=("tpu-v6e",), blocks=None):
    ref = REFS / f"{name}_reference.py"
    program = describe(str(ref)).model_dump(mode="json")
    source = first_kernel(program, get_chip("tpu-v6e"))
    template, target, _ = program_template(program)
    assert target == "full" and f"template={template.name}" in source
    assert "interpret=False" in source and "dimension_semantics" in source and "pl.CostEstimate" in source
    ref_mod = written(tmp_path / f"{name}_ref.py", ref.read_text())
    for t in targets:
        _compile_full(tmp_path, source, ref_mod, t)
    ref_mod.SIZES["check"] = size
    inputs = ref_mod.create_inputs(size="check", key=3)
    want = ref_mod.workload(*inputs)
    small = written(
        tmp_path / f"{name}_small.py", template.render(_smallest(template, **(blocks or {})), "program")
    )
    got = _interpret(small, inputs)
    atol, rtol = ref_mod.CONFIG["atol"], ref_mod.CONFIG["rtol"]
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=atol, rtol=rtol)
    return template, inputs, want


@pytest.mark.slow  # an interpret run at a check size (9-18 s): `make test-slow`
def test_a_reverse_scan_walks_blocks_from_the_end_and_carries_between_them(tmp_path):
    template, inputs, want = _check(
        tmp_path, "cumsum_reverse", FAMILY["cumsum_reverse"][1], ("tpu-v6e", "tpu-v5e")
    )
    assert template.name == "scan"
    # a kernel that restarts its running total at every block is right only in the last block
    source = template.render(_smallest(template), "program")
    forgetful = source.replace(
        "y = _combine(_scan_tile(y, pos, block_l), carry_ref[...])", "y = _scan_tile(y, pos, block_l)"
    )
    assert forgetful != source
    got = _interpret(written(tmp_path / "forgetful.py", forgetful), inputs)
    assert not np.allclose(np.asarray(got), np.asarray(want), atol=1e-3)


@pytest.mark.slow  # an interpret run at a check size: `make test-slow`
def test_argmax_over_a_middle_axis_keeps_the_first_index_across_blocks(tmp_path):
    template, inputs, want = _check(tmp_path, "argmax", FAMILY["argmax"][1])
    assert template.name == "arg_reduce"
    # ties: every value equal, so the first index (0) must win over later blocks' first index
    flat = [jax.numpy.zeros_like(inputs[0])]
    got = _interpret(written(tmp_path / "ties.py", template.render(_smallest(template), "program")), flat)
    assert int(np.asarray(got).max()) == 0
    # a NaN is the max (jnp.argmax): the first NaN's index, also when a later block holds a larger number
    x = np.asarray(inputs[0]).copy()
    x[0, 17, 3], x[0, 30, 3], x[1, 5, 9] = np.nan, 1e30, np.nan
    got = _interpret(written(tmp_path / "nan.py", template.render(_smallest(template), "program")), [x])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.numpy.argmax(x, axis=1)))


def test_a_padded_strided_max_pool_reads_its_halo_from_the_next_block(tmp_path):
    template, inputs, want = _check(
        tmp_path, "maxpool2d", *FAMILY["maxpool2d"][1:2], blocks=FAMILY["maxpool2d"][2]
    )
    assert template.name == "pool"
    source = template.render(_smallest(template, **FAMILY["maxpool2d"][2]), "program")
    blind = source.replace(
        "(r + 1) * (rows_in // halo_rows)", "r * (rows_in // halo_rows)"
    )  # the "halo" is this block's start
    assert blind != source
    got = _interpret(written(tmp_path / "blind.py", blind), inputs)
    assert not np.allclose(np.asarray(got), np.asarray(want))


@pytest.mark.slow  # an interpret run at a check size: `make test-slow`
def test_a_grouped_strided_conv_is_matmuls_over_taps_inside_the_kernel(tmp_path):
    template, _, _ = _check(
        tmp_path,
        "conv2d_grouped",
        FAMILY["conv2d_grouped"][1],
        ("tpu-v5e",),  # v6e: the scan, argmax and pool tests
        FAMILY["conv2d_grouped"][2],
    )
    source = template.render(template.initial, "program")
    assert template.name == "conv" and "jnp.dot(" in source and "conv_general_dilated" not in source


def test_a_transposed_conv_is_refused_by_the_conv_template_with_the_reason(tmp_path):
    ref = tmp_path / "convt_ref.py"
    text = (REFS / "conv2d_reference.py").read_text()
    ref.write_text(
        text.replace("((1, 1), (1, 1)), dimension_numbers", "((1, 1), (1, 1)), (2, 2), dimension_numbers")
    )
    assert ref.read_text() != text
    with pytest.raises(ValueError, match="transposed convolution"):
        build_op_family(describe(str(ref)).model_dump(mode="json"))


@pytest.mark.slow  # 18k's reference traces its convolution on XLA:CPU at several sizes (~100 s on 2 cores)
def test_jaxbench_18k_conv_with_its_biases_gets_the_conv_kernel_biases_as_channel_tiles(tmp_path):
    """18k (conv + bias, relu, + bias, bf16): conv_rows (NCHW read as it lies) takes it over window.py's
    conv; the biases ride in the epilogue as [1, O] tiles."""
    from maxkernel.jaxbench.registry import load_task, task_path

    ref = task_path("18k_Conv2D_ReLU_BiasAdd")
    program = describe(str(ref)).model_dump(mode="json")
    template, target, _ = program_template(program)
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert (
        template.name == "conv_rows" and target == "full" and "c1_ref[...]" in source and "lax.max(" in source
    )
    task = load_task("18k_Conv2D_ReLU_BiasAdd")
    _compile_full(tmp_path, source, task, "tpu-v6e")
    task.SIZES["check"] = {**task.SIZES["small"], "batch_size": 2, "height": 10, "width": 12}
    inputs = task.create_inputs(size="check", key=5)
    small = written(tmp_path / "k18_small.py", template.render(_smallest(template), "program"))
    got, want = _interpret(small, inputs), task.workload(*inputs)
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(want, np.float32), atol=1e-2, rtol=1e-2
    )
    del task.SIZES["check"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "ref", sorted(p.name.removesuffix("_reference.py") for p in REFS.glob("*_reference.py"))
)
def test_every_op_reference_gets_a_kernel_that_compiles_at_full_and_matches_at_small(tmp_path, ref):
    ref_mod = written(tmp_path / "sizes.py", (REFS / f"{ref}_reference.py").read_text())
    _check(tmp_path, ref, ref_mod.SIZES["small"])
