"""Ragged paged attention (7p): one attention block per sequence slot, scatter-added into zeros.

The traced program's structure changes with the batch layout (7 blocks at small, 56 at full), so no
size-generic rewrite of its equations exists; templates/ragged_paged.py recognises what each block computes
and writes one kernel that reads the layout (cu, lengths, page table, count) as values. The adversary: a
reference that reads V from the even combined heads, groups its query heads the other way, or gives every
block the same slot's length is not this program and must not be served as it; a kernel whose causal bound
is one position off must fail the comparison.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.templates.ragged_paged import recognise
from maxkernel.jaxbench.registry import load_task
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.problem.program import describe
from tests.clients.offline._modules import written

TASK = "7p_Ragged_Paged_Attention"
SOURCE = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks" / f"{TASK}.py"


@pytest.fixture(scope="module")
def program() -> dict:
    return describe(TASK).model_dump(mode="json")


def test_7p_is_recognised_with_its_roles_and_scale(program):
    r = recognise(program)
    assert r is not None
    assert (r["q"], r["kv"], r["lens"], r["table"], r["cu"], r["count"]) == (
        "x0",
        "x1",
        "x2",
        "x3",
        "x4",
        "x5",
    )
    assert r["blocks"] == 7  # the small layout's live slots, one block each
    assert r["scale"] == pytest.approx(128**-0.5)
    template, target, _ = program_template(program)
    assert template.name == "ragged_paged" and target == "full"
    # at full: 4096 tokens, 64 slots of 256 pages; the first config fits the 48 MiB the model plans under
    assert template.vmem_bytes(template.initial, {}) <= 48 << 20


def test_the_kernel_matches_the_reference_and_an_off_by_one_bound_does_not(program, tmp_path):
    template, _, _ = program_template(program)
    source = template.render(template.initial, "program")
    bound = "kvl - ql + t, kvl - 1"
    assert bound in source
    broken = source.replace(bound, "kvl - ql + t + 1, kvl - 1")  # each row sees one future position
    ref = load_task(TASK)
    inputs = ref.create_inputs(size="small", key=3)
    want = np.asarray(ref.workload(*inputs), np.float32)
    errs = []
    for name, text in (("good", source), ("broken", broken)):
        kernel = written(tmp_path / f"{name}.py", text)
        with execution.tpu_interpret_mode():
            got = jax.jit(kernel.workload)(*inputs)
        assert got.shape == want.shape and got.dtype == inputs[0].dtype
        errs.append(float(np.abs(np.asarray(got, np.float32) - want).max()))
    assert errs[0] <= 1e-2 and errs[1] > 0.1, errs


@pytest.mark.parametrize(
    "edit",
    [
        ("k, v = kv[:, 0::2], kv[:, 1::2]", "k, v = kv[:, 1::2], kv[:, 0::2]"),  # V at the even heads
        # query head h = g * Hkv + kv head, not kv head * G + g
        ("reshape(cap, hkv, hq // hkv, hd)", "reshape(cap, hq // hkv, hkv, hd).swapaxes(1, 2)"),
        (
            "start, kv_len = cu_q_lens[i], kv_lens[i]",
            "start, kv_len = cu_q_lens[i], kv_lens[0]",
        ),  # one length
    ],
    ids=["v_even", "heads_transposed", "one_length"],
)
def test_a_different_program_is_not_served_as_ragged_paged_attention(edit, tmp_path):
    text = SOURCE.read_text()
    assert edit[0] in text
    path = tmp_path / "other.py"
    path.write_text(text.replace(edit[0], edit[1]))
    other = describe(str(path)).model_dump(mode="json")
    assert recognise(other) is None


def test_the_task_text_lists_a_program_too_large_at_full_as_traced_at_small():
    """At full 7p traces 3865 equations (one block per slot), over the section's limit: the Auto loop's task
    text then carries the same reference traced at small, so the offline model can read it."""
    import asyncio

    from maxkernel.clients.offline.program_text import find_program
    from maxkernel.clients.task_text import LocalTaskSource, task_text

    text = asyncio.run(task_text(LocalTaskSource(), TASK, "full"))
    program = find_program(text)
    assert program is not None and program["size"] == "small"
    assert "full" in program["variants"]  # the target's shapes are still there
    assert program_template(program)[0].name == "ragged_paged"
