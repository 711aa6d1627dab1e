"""The offline walk reads the compiler's utilization: an under-used MXU asks for larger blocks, spills for smaller."""

from __future__ import annotations

import math

from maxkernel.clients.offline.model import OfflineModel, Prompt
from maxkernel.clients.offline.utilization_moves import Utilization, move_rank, parse_utilization

SUMMARY = (
    "workload.1: 185 bundles per grid step; MXU busy in 10% of the loop's bundles, vector loads in 14%, "
    "stores in 22%; load/store-bound: MXU under-used, try larger blocks; VMEM 0.3 of 16.0 MiB scoped."
)


def test_parse_the_analyze_summary_and_report():
    u = parse_utilization(SUMMARY)
    assert u == Utilization(mxu_busy=0.10, spill_stores=0) and u.direction == "grow"
    s = parse_utilization('{"kernels": [{"utilization": {"MXU": 0.7}, "spill_stores": 27}]}')
    assert s == Utilization(mxu_busy=0.7, spill_stores=27) and s.direction == "shrink"
    assert parse_utilization("compile ok, estimate 3 us") is None
    assert Utilization(mxu_busy=0.8, spill_stores=0).direction is None


def _walk_with_base():
    model = OfflineModel()
    walk = model._walk(Prompt(role="planner", text="Task 8p_GEMM (operator dense_matmul)", conversation=""))
    base, _ = walk.next_config("small")
    walk.record(base).estimate_us = 100.0
    walk.last = base
    return walk, base


def _growth(base, cfg):
    return sum(math.log2(cfg[k] / base[k]) for k in cfg if k.startswith("block") and cfg[k] != base[k])


def test_under_used_mxu_moves_to_larger_blocks_and_spills_to_smaller():
    walk, base = _walk_with_base()
    walk.utilization = Utilization(mxu_busy=0.1, spill_stores=0)
    grow, why = walk.next_config("small")
    assert _growth(base, grow) > 0 and "larger blocks" in why
    walk2, small = _walk_with_base()
    base2 = next(
        c for c in walk2.template.configs() if walk2.legal(c) and min(c["block_m"], c["block_n"]) >= 512
    )
    walk2.record(base2).estimate_us = 50.0  # the best so far: the walk steps from it
    walk2.utilization = Utilization(mxu_busy=0.9, spill_stores=40)
    shrink, why2 = walk2.next_config("small")
    assert _growth(base2, shrink) < 0 and "smaller blocks" in why2


def test_move_rank_prefers_the_asked_direction_only_when_asked():
    base = {"block_m": 256, "block_n": 256}
    up, down = {"block_m": 512, "block_n": 256}, {"block_m": 128, "block_n": 256}
    grow = Utilization(mxu_busy=0.2, spill_stores=0)
    assert (move_rank(base, up, grow), move_rank(base, down, grow)) == (0, 1)
    assert move_rank(base, up, None) == move_rank(base, down, None) == 0


def test_the_model_reads_utilization_from_an_analyst_prompt():
    model = OfflineModel()
    from maxkernel.clients.models.base import Message

    msgs = [
        Message(role="system", text="You are the profile analyst."),
        Message(role="user", text=f"Task 8p_GEMM\n## Compiler analysis (libtpu's final schedule)\n{SUMMARY}"),
    ]
    text, _ = model.reply(msgs)
    assert "larger blocks" in text and "MXU busy in 10%" in text
    assert [w.utilization for w in model.walks.values()] == [Utilization(mxu_busy=0.1, spill_stores=0)]
