"""The conv_rows template (templates/conv_rows.py): a 2-D NCHW convolution read and written as it lies.

A VALID, stride-1 conv with a per-channel epilogue (18k's form at a test size) gets conv_rows over
window.py's conv; its first kernel compiles at the reference's full size with the real Mosaic compiler
for v6e, and its smallest-block render matches lax.conv_general_dilated in TPU interpret mode over several
row blocks (the halo crosses blocks), also at 8 input channels (16 output rows per dot). A kernel that
reads its halo from its own block, or one that forgets the kw shift, fails the same check.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from kernel_files import compiled_text

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.conv_rows import refusal
from maxkernel.clients.offline.templates.op_families import core_of
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

REFS = Path(__file__).resolve().parents[2] / "refs" / "ops"

REF = '''"""conv (VALID, NCHW) + bias, relu, + bias, all bf16: 18k's form at a test size."""
import jax
import jax.numpy as jnp

SIZES = {
    "full": {"n": 16, "c": 64, "o": 128, "h": 24, "w": 40},
    "small": {"n": 2, "c": 64, "o": 128, "h": 24, "w": 12},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 4)
    x = jax.random.uniform(ks[0], (d["n"], d["c"], d["h"], d["w"]), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(ks[1], (d["o"], d["c"], 3, 3)) * 0.05).astype(jnp.bfloat16)
    cb = (jax.random.normal(ks[2], (d["o"],)) * 0.05).astype(jnp.bfloat16)
    b = (jax.random.normal(ks[3], (d["o"], 1, 1)) * 0.05).astype(jnp.bfloat16)
    return x, w, cb, b


def workload(x, w, cb, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jax.nn.relu(y + cb.reshape(1, -1, 1, 1)) + b
'''


def _interpret(mod, inputs):
    with execution.tpu_interpret_mode():
        return jax.jit(mod.workload)(*inputs)


def _err(got, want) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype
    return float(np.max(np.abs(np.asarray(got, np.float32) - np.asarray(want, np.float32))))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv_rows")
    ref = root / "convrelu_reference.py"
    ref.write_text(REF)
    program = describe(str(ref)).model_dump(mode="json")
    template, target, _ = program_template(program)
    ref_mod = written(root / "convrelu_ref.py", REF)
    small = template.render({k: v[0] for k, v in template.tunables.items()}, "program")
    return root, program, template, target, ref_mod, small


@pytest.mark.slow  # a compile at full or an interpret run at a check size: `make test-slow`
def test_a_valid_nchw_conv_gets_conv_rows_and_compiles_at_full_for_v6e(built):
    root, program, template, target, ref_mod, _ = built
    assert template.name == "conv_rows" and target == "full"
    source = first_kernel(program, get_chip("tpu-v6e"))
    assert "template=conv_rows" in source and "interpret=False" in source and "pl.CostEstimate" in source
    assert "conv_general_dilated" not in source and "jnp.dot(" in source
    text = compiled_text(root / "first_v6e.py", source, ref_mod.create_inputs)
    assert "tpu_custom_call" in text
    # the output is written as [Ho, Wo, N, O]: going back to NCHW moves no data (no copy of the result)
    assert not [ln for ln in text.splitlines() if " copy(" in ln and "bf16[16,128,22,38]" in ln]


# 2 output rows per dot (~14 s: `make test-slow`), and 16 (the run spans a 16-row halo)
@pytest.mark.parametrize("c", [pytest.param(64, marks=pytest.mark.slow), 8])
def test_conv_rows_matches_the_reference_across_row_blocks(built, c):
    root, _, _, _, ref_mod, small = built
    ref_mod.SIZES["check"] = {"n": 2, "c": c, "o": 128, "h": 40 if c == 8 else 24, "w": 12}
    inputs = ref_mod.create_inputs(size="check", key=3)
    want = ref_mod.workload(*inputs)
    got = _interpret(written(root / f"small_{c}.py", small), inputs)
    # bf16 output: about an ulp at |y| < 2 (a same-precision conv is no closer)
    assert _err(got, want) <= 2e-2
    del ref_mod.SIZES["check"]


@pytest.mark.parametrize(
    "good, bad",
    [
        ("(r + 1) * (th // hb)", "r * (th // hb)"),  # the halo is this block's own first rows
        ("pl.ds(b * nb, m)", "pl.ds(0, m)"),  # every kernel column reads the unshifted positions
    ],
)
def test_a_kernel_with_a_wrong_halo_or_tap_fails_the_check(built, good, bad):
    root, _, _, _, ref_mod, small = built
    broken = small.replace(good, bad)
    assert broken != small
    inputs = ref_mod.create_inputs(size="small", key=3)  # 22 output rows: 3 blocks of 8
    got = _interpret(written(root / f"broken_{abs(hash(bad))}.py", broken), inputs)
    assert _err(got, ref_mod.workload(*inputs)) > 0.05


def test_a_padded_conv_is_refused_with_the_reason_and_left_to_window():
    program = describe(str(REFS / "conv2d_reference.py")).model_dump(mode="json")
    core = core_of(program, "conv")
    assert "padded" in (refusal(core) or "")
    template, _, _ = program_template(program)
    assert template.name == "conv"
