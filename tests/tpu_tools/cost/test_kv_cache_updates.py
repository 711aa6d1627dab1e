"""KV-cache updates as serving stacks write them, compiled for v6e with libtpu's LLO dump: a donated cache is
updated in place (a scatter or a dynamic-update-slice moves its updates, not the cache), a cache the caller
did not donate is copied whole (and the estimate says so), and the scatter's row loop is costed from its own
schedule at the trip count its back edge states. One child process compiles every case (libtpu reads the
dump flags once per process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from maxkernel.tpu_tools.cost.fusions import FUSION_OVERHEAD_US, XLA_HBM_EFFICIENCY
from maxkernel.tpu_tools.hardware.chips import get_chip

V6E = get_chip("tpu-v6e")
TOKENS = 128
PAGED = (2048, 16, 8, 128)  # [num_blocks, block_size, kv_heads, head_dim] bf16: 67 MB, one layer's K
PAGED_BYTES = 2048 * 16 * 8 * 128 * 2
ROWS_BYTES = TOKENS * 8 * 128 * 2  # the decode tokens' new K rows
DECODE = (8, 8192, 8, 128)  # [B, S, H, D] bf16: 134 MB
DECODE_BYTES = 8 * 8192 * 8 * 128 * 2
STEP_BYTES = 8 * 1 * 8 * 128 * 2  # one decode step's [B, 1, H, D]

SCRIPT = """
import json, sys
from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, enable_dump
root = enable_dump(sys.argv[1])
sizes = json.loads(sys.argv[2])
import jax, jax.numpy as jnp
from maxkernel.tpu_tools.cost.fusions import cost_fusions
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.hardware.targets import parse_target

T, PAGED, DECODE = sizes["tokens"], tuple(sizes["paged"]), tuple(sizes["decode"])
def paged(cache, kv, slots):
    nb, bs, h, d = cache.shape
    return cache.reshape(nb * bs, h, d).at[slots].set(kv).reshape(cache.shape)
def paged_add(cache, kv, slots):
    nb, bs, h, d = cache.shape
    return cache.reshape(nb * bs, h, d).at[slots].add(kv).reshape(cache.shape)
def decode(cache, kv, pos):
    return jax.lax.dynamic_update_slice(cache, kv, (0, pos, 0, 0))
bf = jnp.bfloat16
cases = {
    "scatter_donated": (paged, (0,), [(PAGED, bf), ((T, 8, 128), bf), ((T,), jnp.int32)]),
    "scatter_copied": (paged, (), [(PAGED, bf), ((T, 8, 128), bf), ((T,), jnp.int32)]),
    "scatter_add_donated": (paged_add, (0,), [(PAGED, bf), ((T, 8, 128), bf), ((T,), jnp.int32)]),
    "dus_donated": (decode, (0,), [(DECODE, bf), ((8, 1, 8, 128), bf), ((), jnp.int32)]),
    "dus_copied": (decode, (), [(DECODE, bf), ((8, 1, 8, 128), bf), ((), jnp.int32)]),
}
sh = execution.aot_sharding(parse_target("tpu-v6e"))
out = {}
for name, (fn, donate, shapes) in cases.items():
    args = [jax.ShapeDtypeStruct(s, d, sharding=sh) for s, d in shapes]
    traced = jax.jit(fn, donate_argnums=donate).trace(*args)
    compiled, programs, _ = compile_with_dump(fn, args, root, traced)
    t = cost_fusions(compiled, "tpu-v6e", programs)
    out[name] = {
        "total_us": t.total_us, "tier": t.tier, "bytes": t.bytes_accessed, "launch_us": t.program_overhead_us,
        "ops": [f.model_dump() for f in t.fusions],
        "programs": {p.program: {"trips": p.loop_trip_count, "loop": p.loop_bundles,
                                 "line": p.straight_line_bundles} for p in programs},
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def kv(tmp_path_factory):
    dump = tmp_path_factory.mktemp("kv") / "dump"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(dump),
            json.dumps({"tokens": TOKENS, "paged": PAGED, "decode": DECODE}),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _op(case: dict, opcode: str) -> dict:
    """The case's costliest op with this opcode, or (a fusion) whose name holds it."""
    ops = [
        f for f in case["ops"] if f["opcode"] == opcode or (f["opcode"] == "fusion" and opcode in f["name"])
    ]
    return max(ops, key=lambda f: f["estimated_time_us"])


def _at_hbm(nbytes: float) -> float:
    """us to move `nbytes` at the HBM rate an XLA fusion reaches (fusions.py)."""
    return nbytes / (V6E.hbm_bytes_per_s * XLA_HBM_EFFICIENCY) * 1e6


def test_a_donated_scatter_moves_its_rows_and_runs_its_loop_at_the_back_edges_trips(kv):
    case = kv["scatter_donated"]
    assert case["tier"] == "llo"
    scatter = _op(case, "scatter")
    # In place (the fusion's output aliases the donated cache): the new rows read and written, the slots kept
    # in VMEM; charged as a read and a write of the 67 MB cache (the old count) it was 2 x 67 MB.
    assert scatter["bytes_accessed"] == 2 * ROWS_BYTES
    assert case["bytes"] < 1.01 * 2 * ROWS_BYTES + 4 * TOKENS * 4
    # Its row loop states no exit test: its back edge (`scmp.ge %s, 8` -> `sbr.rel (!%p) target = the loop's
    # region`) says 8 trips of 16 rows; the program's windows (iteration_bounds 16) are not its trips.
    prog = case["programs"]["scatter_fusion"]
    assert prog["trips"] == TOKENS // 16
    bundles = prog["line"] + prog["loop"] * prog["trips"]
    assert scatter["tier"] == "llo" and scatter["bound"] == "compute"
    assert scatter["llo_time_us"] == pytest.approx(bundles / (V6E.clock_ghz * 1e3))
    assert scatter["estimated_time_us"] == pytest.approx(scatter["llo_time_us"] + FUSION_OVERHEAD_US)
    # The whole update: the compiler's row loop, far under one pass over the cache (41 us at the HBM peak).
    assert case["total_us"] < 0.25 * PAGED_BYTES / V6E.hbm_bytes_per_s * 1e6


def test_a_scatter_that_adds_reads_the_rows_it_combines_with(kv):
    # `.at[slots].add(kv)`: the old rows are read, combined and written back; `.set` never reads them.
    assert _op(kv["scatter_add_donated"], "scatter")["bytes_accessed"] == 3 * ROWS_BYTES


def test_a_scatter_into_a_cache_not_donated_pays_for_the_copy(kv):
    case = kv["scatter_copied"]
    assert case["tier"] == "llo"
    # XLA copies the cache into VMEM, scatters there and writes it back out: both copies are charged, the
    # write-back (VMEM -> HBM, a copy-start whose destination is HBM) included.
    copies = [f for f in case["ops"] if f["opcode"] == "copy-start" and f["bytes_accessed"] >= PAGED_BYTES]
    assert len(copies) == 2
    assert case["bytes"] >= 2 * PAGED_BYTES
    assert case["total_us"] >= _at_hbm(2 * PAGED_BYTES)
    assert case["total_us"] > 5 * kv["scatter_donated"]["total_us"]
    scatter = _op(case, "scatter")  # in VMEM: no HBM bytes, its loop's trips read from its back edge
    assert scatter["tier"] == "llo" and scatter["bytes_accessed"] == 0


def test_a_donated_dynamic_update_slice_moves_one_step_and_a_copied_one_the_cache(kv):
    donated, copied = kv["dus_donated"], kv["dus_copied"]
    assert donated["tier"] == copied["tier"] == "llo"
    assert donated["bytes"] == 2 * STEP_BYTES
    # One tiny program: its schedule, one DMA round trip and the launch; no pass over the 134 MB cache.
    assert donated["total_us"] < 2 * FUSION_OVERHEAD_US
    copy = _op(copied, "copy")
    assert copy["bytes_accessed"] >= 2 * DECODE_BYTES
    assert copied["total_us"] >= _at_hbm(2 * DECODE_BYTES)
