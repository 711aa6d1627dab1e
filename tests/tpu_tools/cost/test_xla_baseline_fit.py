"""An XLA baseline that cannot run on the chip says so: the compiler's reason rides on the estimate.

v5e has 16 GiB of HBM: 2p's XLA program at full needs 17.56 GiB of temporaries there and does not compile
(the suite then showed "XLA: -" with a roofline figure and no reason). A compile only: nothing runs.
"""

from __future__ import annotations

from pathlib import Path

import jax

from maxkernel.tpu_tools.cost.program_estimate import xla_program_cost
from maxkernel.tpu_tools.hardware.targets import parse_target
from maxkernel.tpu_tools.problem.reference import load_reference
from maxkernel.tpu_tools.profile.reference_side import ReferenceSide, _estimate_reference

REF = Path(__file__).resolve().parents[2] / "refs" / "over_hbm_reference.py"


def _shapes(ref, size):
    return [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in ref.input_shapes(size)]


def test_a_program_over_the_chips_hbm_gives_the_compilers_reason():
    ref = load_reference(str(REF))
    why: list[str] = []
    cost, table = xla_program_cost(ref.workload, _shapes(ref, "full"), parse_target("tpu-v5e"), None, why)
    assert cost == {} and table is None
    assert len(why) == 1 and "RESOURCE_EXHAUSTED" in why[0] and "HBM" in why[0], why
    fits: list[str] = []
    cost, _ = xla_program_cost(ref.workload, _shapes(ref, "small"), parse_target("tpu-v5e"), None, fits)
    assert cost and fits == []


def test_the_reference_estimate_names_a_baseline_that_does_not_run_there():
    ref = load_reference(str(REF))
    over = ReferenceSide(flops=1.0, set_bytes=4 * 65536)
    _estimate_reference(ref, _shapes(ref, "full"), "tpu-v5e", over, None)
    est = over.static_estimate
    assert est is not None and est.tier_note.startswith("model")
    assert "does not compile for tpu-v5e" in est.tier_note and "RESOURCE_EXHAUSTED" in est.tier_note
    assert any("does not compile" in w for w in over.warnings)
    small = ReferenceSide(flops=1.0, set_bytes=4 * 256)
    _estimate_reference(ref, _shapes(ref, "small"), "tpu-v5e", small, None)
    assert "does not compile" not in small.static_estimate.tier_note and not small.warnings
