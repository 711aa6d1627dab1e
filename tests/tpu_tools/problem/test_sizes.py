"""The target size and the derived intermediate check size (problem/sizes.py), dimension by dimension."""

import math

import pytest
from conftest_paths import MATMUL_REF, REFS

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.problem.reference import load_reference
from maxkernel.tpu_tools.problem.sizes import DERIVED, clamp_safe, derive_size


def _grown(ref) -> dict:
    d = ref.derived_size()
    assert d.ok, d.why
    return {k: c.value for k, c in d.grown.items()}


def test_rmsnorm_keeps_the_shared_alignment_and_grows_one_step_each():
    ref = load_reference("12p")
    assert ref.default_size()[0] == "full"
    d = ref.derived_size()
    # grains: gcd(small, full) = 2, 128, 1024: each grows one step, a multiple of small where the grain
    # is small itself; the lead (seq_len, 32x) has no budget left to grow past 1024
    assert d.grains == {"batch": 2, "seq_len": 128, "emb_dim": 1024}
    assert _grown(ref) == {"batch": 4, "seq_len": 256, "emb_dim": 2048}
    assert d.elements <= d.budget_elements
    assert "gcd(1024, 8192) = 1024" in d.grown["emb_dim"].why


def test_gemm_and_flash_attention_and_triangle_multiplication():
    assert _grown(load_reference("8p")) == {"M": 2048, "K": 512}
    # N: 896 and 28672 share 896, and 28672's clamped power-of-two blocks (up to 4096) need a multiple of
    # them above 1024: the first value that keeps both is the target itself, over the budget
    assert "over the budget" in load_reference("8p").derived_size().held["N"]
    flash = load_reference("1p")
    assert _grown(flash) == {"batch": 2, "seq_len": 512, "num_heads": 4}
    held = flash.derived_size().held
    assert "fixes it" in held["head_dim"]  # 128 in both sizes
    assert _grown(load_reference("17p")) == {"N": 256}


def test_the_matmul_example_grows_rows_past_1024_within_the_budget():
    """examples/matmul_reference.py: small 256 x 512 x 256, full 4096^3. One step each (grains 256, 512,
    256 are small's own), then m, the first in SIZES of the dims that scale most, past 1024 rows (2048:
    1280 would break a block clamped at 512)."""
    d = load_reference(MATMUL_REF).derived_size()
    assert d.dims == {"m": 2048, "k": 1024, "n": 512}, d
    assert d.grains == {"m": 256, "k": 512, "n": 256} and d.target == "full"
    assert "past 1024 rows" in d.grown["m"].why and d.elements <= d.budget_elements
    u = d.unaligned
    assert u.ok and u.dims == {"m": 384, "k": 640, "n": 384} and u.off == {"m": 256, "k": 512, "n": 256}


def _table(small: int, target: int) -> dict:
    return {"small": {"rows": small, "cols": 128}, "full": {"rows": target, "cols": 128}}


def _cells(dims: dict) -> int:
    return 2 * dims["rows"] * dims["cols"]


@pytest.mark.parametrize(
    ("small", "target", "expected"),
    [
        (512, 2048, 2048),  # flash's seq % 512: grain 512 (no lane cap); 1536 breaks a clamped 1024 block
        (256, 4224, 1152),  # grain 128 < small: past 1024, not a multiple of small; the target's blocks: 128
        (64, 8192, 2048),  # past 1024 and every power-of-two block up to it divides it
        (24, 600, 600),  # the target is within reach: the target's own rows
        (640, 4096, 2048),  # grain 128: 768, 1280, 1920 break clamped blocks; 1024, then 2048
    ],
)
def test_the_grain_is_what_small_and_the_target_share(small, target, expected):
    d = derive_size(_table(small, target), _cells, target="full")
    assert d.grains["rows"] == math.gcd(small, target) and d.dims["rows"] == expected, d
    assert d.dims["rows"] % d.grains["rows"] == 0 and target % d.grains["rows"] == 0


def test_a_block_that_divides_small_and_the_target_divides_every_grown_value():
    """The contract: a kernel whose blocks divide both sizes is never handed a remainder."""
    for small, target in [(256, 4096), (384, 4096), (96, 1920), (512, 8192), (640, 4224), (8, 4096)]:
        d = derive_size(
            {"small": {"m": small, "n": small}, "full": {"m": target, "n": 2 * target}},
            _cells2,
            target="full",
        )
        for k, change in d.grown.items():
            for block in range(1, small + 1):
                if small % block == 0 and d.target_dims[k] % block == 0:
                    assert change.value % block == 0, (small, target, k, change.value, block)


def _cells2(dims: dict) -> int:
    return dims["m"] * dims["n"]


def test_the_unaligned_probe_breaks_each_grain_by_at_most_a_lane():
    d = derive_size(_table(512, 2048) | {"tiny": {"rows": 1024, "cols": 128}}, _cells, target="full")
    u = d.unaligned
    assert u.ok and u.dims["rows"] == 512 + 128 and u.off == {"rows": 512}  # 640: the seq
    assert "not a multiple of 512" in u.describe()
    ones = derive_size({"small": {"b": 1}, "full": {"b": 7}}, lambda d: d["b"], target="full")
    assert not ones.unaligned.ok and "grain is 1" in ones.unaligned.why


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
    assert dims == {"seq": 512, "heads": 4, "head_dim": 128, "hidden": 512}
    assert dims["hidden"] == dims["heads"] * dims["head_dim"]
    assert "tied" in ref.derived_size().grown["hidden"].why
    x, w = ref.create_inputs(DERIVED, 1)
    assert x.shape == (512, 512) and w.shape == (4, 128)


def test_own_reference_without_full_targets_its_largest_size():
    ref = load_reference(str(REFS / "norm_rows_reference.py"))
    size, why = ref.default_size()
    assert size == "big" and "largest" in why
    assert _grown(ref) == {"rows": 600, "cols": 512}  # grains 24 and 256: the big rows are within reach
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


def test_the_unaligned_size_is_a_check_size_the_reference_builds():
    ref = load_reference(MATMUL_REF)
    assert ref.check_size("unaligned").dims == {"m": 384, "k": 640, "n": 384}
    a, b = ref.create_inputs("unaligned", 1)
    assert a.shape == (384, 640) and b.shape == (640, 384)
    with pytest.raises(UsageError, match="fixed inputs"):  # one size: nothing scales
        load_reference(str(REFS / "jaxbench_style_matmul.py")).check_size("unaligned")


def test_a_block_clamped_to_the_dimension_divides_every_grown_value():
    """block = min(B, dim), B a power of two dividing the target (9p's SwiGLU: "small sizes reuse the
    file"): right at small and the target, so right at the derived size too. 9p's mlp_dim (896 -> 28672)
    has no such value within the budget: held, not grown to 1792 (where its 1024 block fails)."""
    for small, target in [(256, 4096), (896, 28672), (64, 8192), (512, 2048), (640, 4096), (128, 1536)]:
        d = derive_size(_table(small, target), _cells, target="full")
        for change in d.grown.values():
            for b in (2**i for i in range(3, 14)):
                if target % b == 0 and min(b, small) == small or small % b == 0:
                    block = min(b, change.value)
                    assert change.value % block == 0, (small, target, change.value, b)
    assert "rows" not in derive_size(_table(896, 28672), _cells, target="full").grown
    assert load_reference("9p").derived_size().dims["mlp_dim"] == 896


# ---- the derived size drawn from validate's seed offset (#38 item 7) ---------------------------------


@pytest.mark.parametrize("spec", ["12p", str(REFS / "rows_4224_reference.py"), MATMUL_REF])
def test_the_drawn_derived_size_keeps_the_alignment_and_the_same_seed_draws_it_again(spec):
    drawn = {}
    for seed in range(12):
        ref = load_reference(spec)
        ref.derive_seed = seed
        d = ref.derived_size()
        assert d.ok and d.draw == seed and d.elements <= d.budget_elements, d
        for k, g in d.grains.items():
            assert d.dims[k] % g == 0, (k, d.dims)  # the alignment small and the target share
            assert clamp_safe(int(d.dims[k]), int(d.target_dims[k])), (k, d.dims)
        drawn[seed] = d.dims
    if "rows_4224" in spec:  # 1152, 1408, 1664: the alignment leaves a choice, so no fixed size to target
        assert len({tuple(sorted(v.items())) for v in drawn.values()}) > 1, drawn
    # 12p and the matmul example: the element budget and the alignment leave one size to draw
    again = load_reference(spec)
    again.derive_seed = 7
    assert again.derived_size().dims == drawn[7]  # a rerun with the same seed offset reproduces it


def test_a_drawn_derived_size_off_small_multiples_stays_off_them():
    """rows_4224: grain 128 below small's 256: every drawn row count is a multiple of 128 and not of 256,
    so a grid floored by small's 256-row blocks drops a remainder at the derived size, as at the target."""
    for seed in range(12):
        ref = load_reference(str(REFS / "rows_4224_reference.py"))
        ref.derive_seed = seed
        rows = ref.derived_size().dims["rows"]
        assert rows % 128 == 0 and rows % 256 and rows > 1024, rows


def test_the_grown_size_takes_the_lead_dimension_toward_the_target_within_the_element_cap():
    from maxkernel.tpu_tools.problem.sizes import GROWN, MAX_ELEMENTS

    ref = load_reference("12p")
    d = ref.derived_size()
    grown = ref.check_size(GROWN).dims
    assert grown == {"batch": 4, "seq_len": 1024, "emb_dim": 2048} and "toward the target" in d.grown_why
    assert ref.elements_at(grown) <= MAX_ELEMENTS < ref.elements_at(grown | {"seq_len": 2048})
