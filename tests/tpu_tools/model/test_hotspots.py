"""Hotspots of a model step, compiled for a TPU target off the chip (small sizes: seconds, not minutes)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.model.hotspots import find_hotspots


@pytest.fixture(scope="module")
def llama():
    return find_hotspots("llama3_8b_layer", "tpu-v5e", "small")


def test_llama_regions_follow_the_named_scopes_and_carry_the_step(llama):
    ids = {r.region.id for r in llama.regions}
    assert {"attention.sdpa", "attention.qkv_proj", "attention.rope", "attention.out_proj", "mlp"} <= ids
    kinds = {r.region.id: r.region.kind for r in llama.regions}
    assert kinds["attention.sdpa"] == "attention" and kinds["mlp"] == "matmul_epilogue"
    attn_mlp = sum(r.total_us for r in llama.regions if r.region.id.startswith(("attention", "mlp")))
    assert attn_mlp / llama.step_us > 0.8
    # the two RMSNorms have one signature: one region x 2
    norm = next(r for r in llama.regions if r.region.kind == "norm")
    assert norm.region.count == 2 and "attention_norm" in norm.region.name and "mlp_norm" in norm.region.name
    assert llama.sum_ok, llama.sum_note
    assert abs(llama.regions_us - llama.step_us) <= 0.1 * llama.step_us
    for r in llama.regions:
        assert r.roofline_us > 0 and r.tier == llama.tier
        # a region costs time of its own, or XLA fused its ops into a neighbour's fusions (costed there)
        assert r.time_us > 0 or r.fused_into, r
        if not r.fused_into:  # alone in its fusions: never faster than its own roofline
            assert r.headroom >= 0.99, r
        assert r.region.origin and any(".py:" in o for o in r.region.origin)
    sdpa = next(r for r in llama.regions if r.region.id == "attention.sdpa")
    assert sdpa.region.flops == 2 * 2 * 4 * 128 * 128 * 128  # QK^T and PV, 4 heads, s=128, d=128


def test_every_equation_is_in_exactly_one_instance(llama):
    spans = sorted((i.start, i.stop) for i in llama.instances)
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


TWO_LAYERS = """
import jax
from maxkernel.jaxbench.models import llama3_8b_layer as m

SIZES = m.SIZES
CONFIG = {"name": "two_llama_layers"}
create_inputs = m.create_inputs

@jax.jit
def layer(*args):
    return m.workload(*args)

def workload(x, *params):
    return layer(layer(x, *params), *params)
"""


def test_two_identical_layers_merge_with_count_two(tmp_path):
    path = tmp_path / "two_layers.py"
    path.write_text(TWO_LAYERS)
    r = find_hotspots(str(path), "tpu-v5e", "small")
    sdpa = next(c for c in r.regions if c.region.kind == "attention")
    assert sdpa.region.count == 2 and sdpa.region.name == "layer/attention/sdpa"
    assert all(c.region.count in (2, 4) for c in r.regions)  # the norms: 2 per layer


def test_vit_without_scopes_is_grouped_by_pattern():
    r = find_hotspots("vit_l16_block", "tpu-v6e", "small")
    kinds = [c.region.kind for c in r.regions]
    assert kinds.count("attention") == 1 and "norm" in kinds and kinds.count("matmul_epilogue") >= 3
    assert all(c.region.boundary == "pattern" for c in r.regions)


def test_a_model_that_does_not_trace_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        textwrap.dedent(
            """
            import jax.numpy as jnp
            SIZES = {"full": {"n": 8}}
            def create_inputs(dtype=None, *, key=None, size="full"):
                return (jnp.ones((8, 8)),)
            def workload(x):
                return x @ jnp.ones((3, 3))
            """
        )
    )
    with pytest.raises(UsageError, match="does not trace"):
        find_hotspots(str(bad), "tpu-v5e", "full")


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path):
    cases = [
        ["nosuch_model", "--target", "tpu-v5e"],
        ["llama3_8b_layer", "--target", "cpu"],
        ["llama3_8b_layer", "--target", "tpu-v5e", "--size", "huge"],
    ]
    for argv in cases:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "maxkernel.tpu_tools.cli.main",
                "hotspots",
                *argv,
                "--html",
                str(tmp_path / "h.html"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("maxkernel")]
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, (argv, p.stderr[-2000:])
    assert not (tmp_path / "h.html").exists()


@pytest.mark.slow
def test_cli_json_and_picture(tmp_path):
    html = tmp_path / "h.html"
    p = subprocess.run(
        [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "hotspots", "llama3_8b_layer", "--target",
         "tpu-v5e", "--size", "small", "--json", "--html", str(html)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads(p.stdout)
    assert report["kind"] == "hotspots" and report["regions"]
    page = html.read_text()
    assert "<svg" in page and "attention.sdpa" in page and "estimate" in page


def test_a_scanned_layer_stack_is_split_into_its_layers_regions(tmp_path):
    # One lax.scan over stacked weights used to be one opaque region holding the whole stack; unrolled,
    # each layer's named scopes are regions, merged across the layers with their count.
    from conftest_paths import REFS

    r = find_hotspots(str(REFS / "scanned_layers_model.py"), "tpu-v6e", "small")
    by_name = {c.region.name: c for c in r.regions}
    assert by_name["attn"].region.count == 3 and by_name["attn"].region.kind == "attention"
    assert by_name["mlp"].region.count == 3
    assert "head" in by_name and by_name["head"].region.count == 1
    assert sum(c.total_us for c in r.regions) == pytest.approx(r.step_us - 5.0, rel=0.1)


def test_transforms_and_remat_are_not_boundaries_the_user_drew():
    # jax.nn.dot_product_attention vmaps inside the user's "attention" scope (its ops carry "vmap(...)" in
    # their name stack), and a fori_loop of a jax.checkpoint'ed step binds remat: the attention is one
    # region of kind attention, and the checkpointed step is a region with a count of its iterations.
    from conftest_paths import REFS

    r = find_hotspots(str(REFS / "mixed_style_model.py"), "tpu-v6e", "small")
    by_name = {c.region.name: c for c in r.regions}
    assert by_name["attention"].region.kind == "attention"
    assert not [n for n in by_name if "vmap" in n]
    assert by_name["mlp"].region.count == 2 and by_name["mlp"].region.ops.get("dot_general") == 2
    assert "remat2" not in {op for c in r.regions for op in c.region.ops}
    assert by_name["stem"].region.ops.get("conv_general_dilated") == 1  # the user's jitted function


def test_a_data_dependent_while_loop_is_a_loop_region_not_an_elementwise_one():
    from conftest_paths import REFS

    r = find_hotspots(str(REFS / "while_loop_model.py"), "tpu-v6e", "small")
    (loop,) = [c for c in r.regions if c.region.ops.get("while")]
    assert loop.region.kind == "loop" and loop.region.ops == {"while": 1}
    assert {"proj", "norm"} <= {c.region.name for c in r.regions}


def test_a_layer_from_an_installed_model_library_points_at_the_librarys_line(tmp_path, monkeypatch):
    # A model library (gemma, recurrentgemma) writes its ops in site-packages: the region's line is the
    # library's, where the op is written, not the user's one call into it. Only a framework's own layer
    # (Flax's nn.Dense, Equinox's Linear) is skipped for the model's line: test_library_models checks that.
    lib = tmp_path / "venv" / "lib" / "site-packages" / "layerlib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(
        "import jax, jax.numpy as jnp\n\n\ndef dense(x, w):\n    with jax.named_scope('dense'):\n"
        "        return jnp.dot(x, w)\n"
    )
    monkeypatch.syspath_prepend(str(lib.parent))
    model = tmp_path / "user_model.py"
    model.write_text(
        textwrap.dedent(
            """
            import jax, jax.numpy as jnp
            import layerlib
            SIZES = {"full": {"n": 512}, "small": {"n": 128}}
            CONFIG = {"name": "user_model", "dtype": "float32", **SIZES["full"]}


            def create_inputs(dtype=None, *, key=None, size="full"):
                n = SIZES[size]["n"]
                k1, k2 = jax.random.split(jax.random.key(0) if key is None else key)
                return jax.random.normal(k1, (n, n)), jax.random.normal(k2, (n, n))


            def workload(x, w):
                return jnp.tanh(layerlib.dense(x, w))  # the user's line
            """
        )
    )
    r = find_hotspots(str(model), "tpu-v6e", "small")
    (dense,) = [c for c in r.regions if c.region.name == "dense"]
    lines = [o for o in dense.region.origin if ".py:" in o]
    assert lines and all(o.startswith(f"{lib / '__init__.py'}:6") and "(dense)" in o for o in lines), lines


def test_variants_of_a_layer_are_named_by_what_only_one_computes_and_found_without_the_word():
    """Gemma 2's local and global attentions differ only by their layers in the name; the word says what
    differs: the library function that writes the ops only one has (_create_sliding_mask)."""
    from maxkernel.tpu_tools.model.regions import Region, assign_ids, matching_id

    def region(name, ops, kind="attention"):
        return Region.model_construct(name=name, kind=kind, ops=ops, input_specs=[], id="")

    local = region("Transformer/layer_{0,2}/attn", {"dot_general": 2, "cond": 1, "lt": 1})
    glob = region("Transformer/layer_{1,3}/attn", {"dot_general": 2})
    einsums = [
        region(f"Transformer/layer_{{0-3}}/mlp/Einsum_{k}", {"dot_general": 1}, "matmul") for k in (0, 1)
    ]
    where = {
        "cond": "_create_sliding_mask",
        "lt": "_create_sliding_mask",
        "dot_general": "Attention.__call__",
    }
    regions = [local, glob, *einsums]
    assign_ids(regions, {id(local): where, id(glob): {"dot_general": "Attention.__call__"}})
    assert [r.id for r in regions] == [
        "Transformer.layer_{0,2}.attn.sliding_mask",
        "Transformer.layer_{1,3}.attn.no_sliding_mask",
        "Transformer.layer_{0-3}.mlp.Einsum_0",  # a module's own number is its name, not a layer's
        "Transformer.layer_{0-3}.mlp.Einsum_1",
    ]
    # without a function to name, the primitive only one has
    a, b = region("m/layer_0/attn", {"cond": 1, "exp": 1}), region("m/layer_1/attn", {"exp": 1})
    assign_ids([a, b])
    assert (a.id, b.id) == ("m.layer_0.attn.with_cond", "m.layer_1.attn.no_cond")
    # the same ops in every layer: the layers alone tell them apart, no word
    c, d = region("m/layer_0/mlp", {"dot_general": 1}), region("m/layer_1/mlp", {"dot_general": 1})
    assign_ids([c, d])
    assert (c.id, d.id) == ("m.layer_0.mlp", "m.layer_1.mlp")
    ids = [r.id for r in regions]
    assert matching_id(ids, "Transformer.layer_{0,2}.attn") == "Transformer.layer_{0,2}.attn.sliding_mask"
    assert matching_id(ids, "Transformer.layer_{0-3}.mlp") is None  # two regions under it: not one
    assert matching_id(ids, "Transformer.layer_{0,2}") is None
