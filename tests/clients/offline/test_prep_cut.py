"""A contraction whose operand is made from the inputs alone (stages.prep_cut, staged.build_prep).

28k's transposed conv is traced as its input scattered into zeros at stride 2, padded, and its kernel
flipped and transposed, then a stride-1 conv: the conv reads computed values, so no conv template took it
and the offline model refused. Cut, the preparation is plain-JAX glue and the rest (conv, LayerNorm over
W, GELU) is written by the template its own class picks. The glue's sizes must be the right input dims:
28k's batch and channels are equal at every SIZES entry and at the derived size, as are its height and
width, so `describe` adds the shape-contract probe's one-dim-moved sizes for SIZES keys tied that way.
"""

from __future__ import annotations

import pytest

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import NoTemplateFits, program_template
from maxkernel.clients.offline.stages import prep_cut
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe

PLAIN = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"rows": 1024, "cols": 1024}, "small": {"rows": 64, "cols": 64}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    k = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    a, b = jax.random.split(k)
    return jax.random.normal(a, (s["rows"], s["cols"])), jax.random.normal(b, (s["cols"],))


def workload(x, v):
    return x * jnp.broadcast_to(v, (x.shape[0], v.shape[0]))
"""


def _program(ref: str) -> dict:
    return describe(ref).model_dump(mode="json")


def test_two_dims_equal_at_every_size_are_told_apart_by_a_size_that_moves_one():
    p = _program("28k")
    # one key of each tied pair moved alone tells the pair apart: in_channels from batch_size, width from height
    assert {k for k in p["variants"] if k.startswith("unaligned")} == {
        "unaligned:in_channels",
        "unaligned:width",
    }
    e = next(
        e for e in p["equations"] if e["primitive"] == "broadcast_in_dim"
    )  # the zeros the input is set in
    assert Symbolic(p).shape_elems(e, "shape")[:2] == ["sh[0][0]", "sh[0][1]"]  # not the batch's dim twice
    # keys that differ somewhere are no tie: a square weight or a batch every input shares costs no trace
    assert not any(k.startswith("unaligned") for k in _program("1p")["variants"])


def test_a_transposed_convs_dilation_is_glue_and_its_conv_a_kernel():
    p = _program("28k")
    stages = prep_cut(p)
    assert [s.role for s in stages] == ["glue", "rest"]
    glue_ops = {e["primitive"] for e in stages[0].program["equations"]}
    assert {"scatter", "pad", "rev"} <= glue_ops and "conv_general_dilated" not in glue_ops
    assert stages[1].program["equations"][0]["primitive"] == "conv_general_dilated"
    tpl, target, _ = program_template(p)
    assert tpl.name == "staged" and target == "full"
    src = first_kernel(p, get_chip("tpu-v6e"))
    # the zeros, the index arithmetic, the scatter and the edge pad are one interior pad of the input
    # (strided_scatter.py): stride 2, the transposed conv's edges k - 1 - p = 2
    assert "lax.scatter(" not in src and "broadcast_in_dim(jnp.asarray(0.0" not in src
    (pad,) = [line for line in src.splitlines() if "lax.pad(x0, " in line]
    assert "((0, 0, 0), (0, 0, 0), (2, 2, 1), (2, 2, 1), (2, 2, 1))" in pad, pad
    assert "s2_conv_workload" in src and "conv_depth" in src  # a 3-D conv no window block holds at full


def test_a_contraction_that_reads_its_inputs_is_not_cut():
    """8p's dot reads its inputs as they are: nothing to prepare, no cut (its matmul template stands)."""
    assert prep_cut(_program("8p")) is None
    assert program_template(_program("8p"))[0].name == "matmul"


def test_no_template_is_still_one_precise_refusal(tmp_path):
    ref = tmp_path / "sort_ref.py"
    ref.write_text(
        PLAIN.replace(
            "return x * jnp.broadcast_to(v, (x.shape[0], v.shape[0]))", "return jnp.sort(x, axis=0)"
        )
    )
    with pytest.raises(NoTemplateFits):
        program_template(_program(str(ref)))
