"""XLA programs costed whole from libtpu's dump (tests/data/llo/regenerate_xla.py made the v6e inputs):
in-place updates move their slice, scalar ops in a loop body are no launch, a program pays one launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.tpu_tools.cost.fusions import PROGRAM_OVERHEAD_US, cost_hlo_text
from maxkernel.tpu_tools.cost.llo_parse import parse_dump_dir
from maxkernel.tpu_tools.hardware.chips import get_chip

DATA = Path(__file__).parents[2] / "data" / "llo"
V6E = get_chip("tpu-v6e")
CACHE_BYTES = 8 * 16384 * 8 * 128 * 2  # the donated KV cache, 268 MB
SLOT_BYTES = 8 * 1 * 8 * 128 * 2  # one step's slot


def _table(case: str, drop: str | None = None, dump: bool = True):
    programs = [p for p in parse_dump_dir(DATA / case) if p.program != drop] if dump else None
    return cost_hlo_text((DATA / case / "program.hlo.txt").read_text(), V6E, programs), programs


def test_a_kv_cache_loop_moves_its_slot_per_step_not_the_cache():
    table, _ = _table("v6e_kv_loop")
    assert table.tier == "llo" and table.fallbacks == []
    dus = next(f for f in table.fusions if "dynamic-update-slice" in f.name)
    assert dus.count == 128 and dus.tier == "llo"
    # The fusion's cache operand is aliased in place: only the slot is written, 128 times (its carry stays
    # in VMEM). Charged as a full copy it would be 128 x 2 x 268 MB.
    assert dus.bytes_accessed == 128 * SLOT_BYTES
    assert table.bytes_accessed < 2 * CACHE_BYTES / 100
    assert table.total_us < 128 * 2.0  # a few us per step at most, not 128 x 268 MB at HBM speed (~42 ms)


def test_scalar_ops_in_a_while_body_are_no_launch_and_the_loop_control_is_the_tlps():
    table, programs = _table("v6e_kv_loop")
    scalars = [f for f in table.fusions if f.opcode in ("add", "copy") and f.output_shapes == ["s32[]"]]
    assert {f.count for f in scalars} >= {128}
    assert all(f.estimated_time_us == 0 and f.tier == "llo" for f in scalars)
    # The launch and the loop's bookkeeping are the top-level program's own bundles: the loop that runs the
    # body's fusion x 128, the rest once (a may-alias copy of the cache it skips when donated, counted once).
    tlp = next(p for p in programs if p.program == "TLP")
    at = dict(tlp.calls)["bitcast_dynamic-update-slice_fusion.2"]
    body = next(lp for lp in tlp.loops if lp.start <= at < lp.start + lp.bundles)
    assert table.program_tier == "llo"
    bundles = tlp.straight_line_bundles + tlp.loop_bundles + 127 * body.bundles
    assert table.program_overhead_us == pytest.approx(bundles / (V6E.clock_ghz * 1e3), rel=0.01)
    assert table.program_overhead_us < 128 * 0.1  # never a microsecond a trip
    # Without the dump the scalar ops are still no launch (model tier, said so).
    plain, _ = _table("v6e_kv_loop", dump=False)
    bare = [f for f in plain.fusions if f.opcode in ("add", "copy") and f.output_shapes == ["s32[]"]]
    assert all(f.estimated_time_us == 0 and "scalar op" in (f.fallback or "") for f in bare)
    assert plain.tier == "model" and plain.program_overhead_us == PROGRAM_OVERHEAD_US


def test_a_tiny_program_pays_one_launch_and_its_async_copies_overlap():
    table, _ = _table("v6e_tiny_attention")
    assert table.tier == "llo" and table.fallbacks == []
    starts = [f for f in table.fusions if f.opcode == "copy-start"]
    assert starts and all(f.estimated_time_us < 0.1 for f in starts)  # DMAs the TLP issues, not programs
    vmem_only = [f for f in table.fusions if f.opcode == "fusion" and f.bytes_accessed == 0]
    assert vmem_only and all(f.estimated_time_us < 0.2 for f in vmem_only)  # no DMA round trip to wait on
    assert table.program_overhead_us < 1.0
    assert table.total_us == pytest.approx(
        sum(f.estimated_time_us for f in table.fusions) + table.program_overhead_us
    )
    assert table.total_us < 5.0


def test_an_op_whose_program_is_missing_falls_back_and_says_so():
    table, _ = _table("v6e_tiny_attention", drop="fusion.9")
    assert table.tier == "model"
    assert table.fallbacks == ["fusion.9 (fusion): no LLO program of its own in the dump"]
    assert "fusion.9" in table.note and "1 op(s) fell back" in table.note
    assert all(f.tier == "llo" for f in table.fusions if f.name != "fusion.9")


def test_one_element_ops_the_top_level_program_schedules_are_its_bundles_not_launches():
    """7p's XLA program computes each sequence's offsets as s32[1] ops outside any fusion (296 of them at
    full); libtpu runs them in the top-level program, whose schedule names each one. Charged a launch each
    (model tier) they added 296 us and made the whole baseline tier `model`."""
    table, programs = _table("v6e_slot_offsets")
    tlp = next(p for p in programs if p.program == "TLP")
    ones = [
        f
        for f in table.fusions
        if f.opcode in ("minimum", "add", "compare", "select")
        and f.output_shapes in (["s32[1]"], ["pred[1]"])
    ]
    assert len(ones) == 16  # 4 blocks x (add, clamp, sign test, select)
    assert all(f.name in tlp.annotated_ops for f in ones)
    assert all(f.tier == "llo" and f.estimated_time_us < 0.01 for f in ones)
    assert all("runs inline" in " ".join(f.notes) for f in ones)
    # without the top-level program's dump nothing says where they run: the model tier, said so
    bare, _ = _table("v6e_slot_offsets", drop="TLP")
    again = [f for f in bare.fusions if f.name in {o.name for o in ones}]
    assert len(again) == 16 and all(f.tier == "model" and f.fallback for f in again)
