"""Extract a model region as a reference, checked by splicing it back (small sizes: seconds each)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.model import extract as extract_mod
from maxkernel.tpu_tools.model import regions as regions_mod
from maxkernel.tpu_tools.model.extract import ExtractFailure, extract_region, write_new
from maxkernel.tpu_tools.model.flat import flatten
from maxkernel.tpu_tools.problem.reference import load_reference


def region_ids(model: str) -> list[str]:
    ref = load_reference(model)
    flat = flatten(ref.workload, ref.input_shapes("small"))
    return [r.id for r in regions_mod.merge(flat, regions_mod.instances(flat))]


@pytest.mark.slow  # every region of a model, each spliced into the whole model run op by op: minutes
@pytest.mark.parametrize("model", ["llama3_8b_layer", "mixtral_8x7b_moe_layer", "vit_l16_block"])
def test_every_region_spliced_back_gives_bit_identical_outputs(model, tmp_path):
    ids = region_ids(model)
    assert len(ids) >= 3
    for rid in ids:
        report, text = extract_region(model, rid)
        assert report.region == rid and "bit-identical" in report.checks[0], report.checks
        path = write_new(tmp_path / f"{rid}.py", text)
        ref = load_reference(str(path))
        assert set(ref.info.sizes) == {"full", "small", "derived"}  # every JaxBench model has a derived size
        assert ref.default_check_sizes() == (["small", "derived"], [])
        assert any("at its derived size" in c and "bit-identical" in c for c in report.checks), report.checks
        small = ref.create_inputs("small", 3)
        assert [list(x.shape) for x in small] == [s.shape_small for s in report.inputs]
        full = ref.input_shapes("full")
        assert [list(x.shape) for x in full] == [s.shape_full for s in report.inputs]


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_inputs_are_drawn_with_the_statistics_the_region_sees(tmp_path):
    report, text = extract_region("llama3_8b_layer", "attention.sdpa")
    ref = load_reference(str(write_new(tmp_path / "sdpa.py", text)))
    xs = ref.create_inputs("small", 1)
    for x, st in zip(xs, report.inputs, strict=True):
        a = np.asarray(x, np.float64)
        assert st.kind == "float" and a.min() >= st.min and a.max() <= st.max
        assert abs(a.mean() - st.mean) < 0.1 * st.std + 1e-3 and abs(a.std() / st.std - 1) < 0.1
    assert report.tolerance.atol == 1e-2 and "bfloat16" in report.tolerance.source  # bf16 output
    # the same seed draws the same inputs; another seed others
    assert all(np.array_equal(a, b) for a, b in zip(xs, ref.create_inputs("small", 1), strict=True))
    assert not np.array_equal(xs[0], ref.create_inputs("small", 2)[0])


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_an_emitted_region_that_differs_from_the_model_is_refused(monkeypatch):
    """The check on creation is real: an emitter slip (one add written as a subtract) fails the splice."""
    real = extract_mod._body

    def slipped(flat, inst, fn_name):
        return [ln.replace("lax.add(", "lax.sub(", 1) for ln in real(flat, inst, fn_name)]

    monkeypatch.setattr(extract_mod, "_body", slipped)
    with pytest.raises(ExtractFailure, match="differ from the original"):
        extract_region("llama3_8b_layer", "attention")


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_a_derived_body_that_differs_from_the_model_is_refused(monkeypatch):
    """The derived size's body is checked on its own: a slip there alone fails its splice at derived."""
    real = extract_mod._body

    def slipped(flat, inst, fn_name):
        lines = real(flat, inst, fn_name)
        return (
            [ln.replace("lax.add(", "lax.sub(", 1) for ln in lines] if fn_name == "region_derived" else lines
        )

    monkeypatch.setattr(extract_mod, "_body", slipped)
    with pytest.raises(ExtractFailure, match="spliced back at derived"):
        extract_region("llama3_8b_layer", "attention")


def test_unknown_region_is_a_usage_error_naming_the_regions():
    with pytest.raises(UsageError, match=r"no region 'nope' in llama3_8b_layer.*attention\.sdpa"):
        extract_region("llama3_8b_layer", "nope")


def test_cli_bad_inputs_exit_2_with_one_line_and_write_nothing(tmp_path):
    existing = tmp_path / "there.py"
    existing.write_text("# mine\n")
    cases = [
        (["llama3_8b_layer", "--region", "nope", "--out", str(tmp_path / "a.py")], "no region 'nope'"),
        (["no_such_model", "--region", "mlp", "--out", str(tmp_path / "b.py")], "no_such_model"),
        (["llama3_8b_layer", "--region", "mlp", "--out", str(existing)], "exists"),
    ]
    for argv, message in cases:
        p = subprocess.run(
            [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "extract", *argv],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("maxkernel")]
        assert p.returncode == 2 and len(lines) == 1 and message in lines[0], (argv, p.stderr[-2000:])
        assert "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["there.py"] and existing.read_text() == "# mine\n"


@pytest.mark.slow  # the region spliced into the whole unrolled stack at small and derived: ~30 s
def test_a_region_inside_a_scanned_layer_stack_splices_back_bit_identically(tmp_path):
    from conftest_paths import REFS

    model = str(REFS / "scanned_layers_model.py")
    report, text = extract_region(model, "attn")
    assert "bit-identical" in report.checks[0] and "3 instance" in report.checks[0], report.checks
    ref = load_reference(str(write_new(tmp_path / "attn.py", text)))
    assert [list(x.shape) for x in ref.input_shapes("full")] == [s.shape_full for s in report.inputs]


def test_a_parameter_the_model_holds_constant_is_drawn_with_spread(tmp_path):
    """A bias the library initializes to zero is recorded with std 0: drawn so, a kernel that drops it would
    pass. It is drawn around its value with spread instead."""

    model = tmp_path / "zero_bias_model.py"
    model.write_text(
        "import jax, jax.numpy as jnp\n"
        'SIZES = {"full": {"n": 256}, "small": {"n": 128}}\n'
        'CONFIG = {"name": "zero_bias", "dtype": "float32"}\n\n\n'
        'def create_inputs(dtype=None, *, key=None, size="full"):\n'
        '    n = SIZES[size]["n"]\n'
        "    k = jax.random.key(0) if key is None else key\n"
        "    return jax.random.normal(k, (n, n)), jnp.zeros((n,))\n\n\n"
        "def workload(x, b):\n"
        '    with jax.named_scope("dense"):\n'
        "        return jnp.tanh(x @ x + b)\n"
    )
    report, text = extract_region(str(model), "dense")
    assert report.inputs[1].std == 0.0  # what the model feeds it
    ref = load_reference(str(write_new(tmp_path / "dense.py", text)))
    _, b = ref.create_inputs("small", 3)
    assert float(np.std(np.asarray(b))) > 0.05
