"""The target size and the derived intermediate check size (problem/sizes.py), dimension by dimension."""

import pytest
from conftest_paths import REFS

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.problem.reference import load_reference
from maxkernel.tpu_tools.problem.sizes import DERIVED, derive_size


def _grown(ref) -> dict:
    d = ref.derived_size()
    assert d.ok, d.why
    return {k: c.value for k, c in d.grown.items()}


def test_rmsnorm_grows_rows_past_small_and_the_lane_dim_to_a_non_multiple():
    ref = load_reference("12p")
    assert ref.default_size()[0] == "full"
    # batch and seq_len keep their grain (2, 128): only multiples of small exist, so 3x then 2x (budget);
    # emb_dim's grain is 128 < 1024, so 1152: not a multiple of small
    assert _grown(ref) == {"batch": 6, "seq_len": 256, "emb_dim": 1152}
    d = ref.derived_size()
    assert d.elements <= d.budget_elements
    assert "not a multiple of small" in d.grown["emb_dim"].why


def test_gemm_and_flash_attention_and_triangle_multiplication():
    assert _grown(load_reference("8p")) == {"M": 384, "K": 384, "N": 1024}
    flash = load_reference("1p")
    assert _grown(flash) == {"batch": 3, "seq_len": 384}
    held = flash.derived_size().held
    assert "fixes it" in held["head_dim"]  # 128 in both sizes
    assert "over the budget" in held["num_heads"]  # says which and why
    assert _grown(load_reference("17p")) == {"N": 256}


def test_a_shape_the_reference_refuses_is_held_with_its_reason():
    d = load_reference("7p").derived_size()
    assert "the reference refuses it" in d.held["max_num_seqs"]
    assert d.held["q_lens"] == "not an integer dimension"


def test_a_mesh_reference_keeps_its_device_count_and_a_split_the_mesh_takes():
    """51m-53m: devices is held, every grown input still splits over the 4 chips, a shape that does not
    split is refused like any shape the reference refuses."""
    for task in ("51m", "52m", "53m"):
        ref = load_reference(task)
        d = ref.derived_size()
        assert d.ok and d.dims["devices"] == 4 and "fixes it" in d.held["devices"], d
        ref.elements_at(d.dims)  # the derived size lays out over the mesh
    with pytest.raises(ValueError, match="does not split over axis 'x'"):
        load_reference("51m").elements_at({"devices": 4, "M": 192, "K": 384, "N": 642})


def test_tied_dimensions_stay_consistent():
    """hidden = heads x head_dim in every size: grown apart the reference's reshape refuses, so the tie holds."""
    ref = load_reference(str(REFS / "tied_heads_reference.py"))
    dims = ref.derived_size().dims
    assert dims == {"seq": 192, "heads": 6, "head_dim": 128, "hidden": 768}
    assert dims["hidden"] == dims["heads"] * dims["head_dim"]
    assert "tied" in ref.derived_size().grown["hidden"].why
    x, w = ref.create_inputs(DERIVED, 1)
    assert x.shape == (192, 768) and w.shape == (6, 128)


def test_own_reference_without_full_targets_its_largest_size():
    ref = load_reference(str(REFS / "norm_rows_reference.py"))
    size, why = ref.default_size()
    assert size == "big" and "largest" in why
    assert _grown(ref) == {"rows": 32, "cols": 384}  # grains 8 and 128: neither a multiple of small
    assert ref.default_check_sizes() == (["small", DERIVED], [])


def test_a_reference_with_one_size_has_no_derived_size_and_says_why():
    ref = load_reference(str(REFS / "jaxbench_style_matmul.py"))
    names, notes = ref.default_check_sizes()
    assert names == ["full"] and "fixed inputs" in notes[0]
    with pytest.raises(UsageError, match="no derived size"):
        ref.check_size(DERIVED)


def test_ties_are_imposed_only_where_the_reference_needs_them():
    """c = 4 x a in both sizes: grown apart unless the reference refuses (as 16p's chance tie would be)."""
    table = {"full": {"a": 16, "c": 64, "d": 1024}, "small": {"a": 4, "c": 16, "d": 256}}
    free = derive_size(table, lambda dims: dims["a"] * dims["c"] * dims["d"])
    assert not any("tied" in c.why for c in free.grown.values()), free.grown

    def needs_tie(dims):
        if dims["c"] != 4 * dims["a"]:
            raise ValueError("c must be 4 x a")
        return dims["a"] * dims["c"] * dims["d"]

    tied = derive_size(table, needs_tie)
    assert tied.dims["c"] == 4 * tied.dims["a"] > 16 and "tied" in tied.grown["c"].why
