"""Never "no kernel": ops no Pallas TPU body lowers as traced, written in-kernel or left to XLA beside kernels.

`lax.top_k` (no Mosaic lowering) is written in the kernel body as k rounds of max-and-mask over the row
(emit.top_k_in_kernel): the MoE router and a sampler's vocabulary top-k are one kernel each. A sort, a
scatter or a top_k too wide for rounds is held apart (stages.held_cut): plain-JAX glue that XLA runs, the
rest in kernels by their own templates, a lone cumsum by the scan family's kernel. The judge's
work_outside_kernel rules are unchanged: the nucleus filter's composite passes them, and the same program
with its softmax left to XLA too does not. References at production shapes: tests/refs/unlowerable.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.auto.loop import parts_line
from maxkernel.clients.offline.classify import classify
from maxkernel.clients.offline.model import program_template
from maxkernel.clients.offline.stages import held_cut
from maxkernel.clients.offline.templates.staged import unlowerable
from maxkernel.tpu_tools.hardware import execution
from maxkernel.tpu_tools.problem.emit import body_lines
from maxkernel.tpu_tools.problem.work_check import census_of, work_verdict
from tests.clients.offline._modules import program_of, written

REFS = Path(__file__).resolve().parents[2] / "refs" / "unlowerable"


def _smallest(template) -> dict:
    return {k: v[0] for k, v in template.tunables.items()}


def _interpret(mod, inputs):
    with execution.tpu_interpret_mode():
        return jax.jit(mod.workload)(*inputs)


def test_top_k_is_written_in_the_kernel_as_rounds_of_max_and_mask():
    program = program_of(REFS / "moe_router_topk_reference.py")
    assert classify(program).kind != "none"
    template, target, _ = program_template(program)
    assert (template.name, target) == ("fused", "full")  # softmax, top-8 and the renormalisation: one kernel
    mosaic = "\n".join(body_lines(program))
    assert "lax.top_k(" not in mosaic and "lax.fori_loop(0, 8, " in mosaic
    assert any("lax.top_k(" in line for line in body_lines(program, mosaic=False))  # plain JAX: as traced


def test_a_top_k_too_wide_for_rounds_is_held_and_a_lone_one_has_no_kernel(tmp_path):
    src = (REFS / "sampling_topk_reference.py").read_text().replace("TOP_K = 50", "TOP_K = 1000")
    ref = tmp_path / "wide_topk_reference.py"
    ref.write_text(src)
    program = program_of(ref)
    found = classify(program)
    assert found.kind == "none" and found.unsupported == ["top_k"]
    with pytest.raises(Exception, match="no stage is left for a kernel"):
        program_template(program)  # nothing but the held op: no kernel to write (the judge's no_kernel)


def test_the_nucleus_filter_is_cut_around_its_sort_and_its_cumsum():
    program = program_of(REFS / "nucleus_filter_reference.py")
    assert classify(program).kind == "none"  # sort
    stages = held_cut(program, unlowerable(program))
    assert [s.role for s in stages] == ["kernel", "held", "kernel", "held", "kernel"]
    assert {e["primitive"] for e in stages[1].program["equations"]} == {"sort"}
    assert {e["primitive"] for e in stages[3].program["equations"]} == {"cumsum"}
    # the where's zeros read no input: made again in the last kernel, never the first one's output via HBM
    assert len(stages[0].outputs) == 1
    assert "broadcast_in_dim" in {e["primitive"] for e in stages[4].program["equations"]}
    template, target, _ = program_template(program)
    assert (template.name, target) == ("staged", "full")
    src = template.source
    assert "left to XLA in plain JAX (sort: no Pallas TPU kernel body lowers it as traced)" in src
    assert "the held op's kernel (`scan` template: cumsum)" in src
    assert "lax.sort(" in src and src.count("pl.pallas_call(") == 3


def test_a_scatter_add_and_the_casts_only_it_reads_go_to_xla_and_the_norm_reads_its_scale_itself():
    program = program_of(REFS / "scatter_add_rmsnorm_reference.py")
    assert classify(program).unsupported == ["scatter-add"]
    stages = held_cut(program, unlowerable(program))
    assert [s.role for s in stages] == ["kernel", "held", "kernel"]
    # the scale's cast and broadcast run where the norm reads them, not in the first stage through HBM
    assert "x3" in stages[2].program["input_names"] and "x3" not in stages[0].program["input_names"]
    template, target, _ = program_template(program)
    assert (template.name, target) == ("staged", "full")
    src = template.source
    assert "Stage 1, glue in plain JAX (add, broadcast_in_dim, convert_element_type, lt, select_n" in src
    assert "Stage 2, left to XLA in plain JAX (scatter-add" in src and "Stage 3, a kernel (`rowwise`" in src
    assert src.count("pl.pallas_call(") == 1


def test_parts_line_names_the_kernels_and_what_xla_runs():
    work = {
        "num_pallas_calls": 2,
        "data_flow_pallas_calls": ["pallas_call #1 (s1_offline_rowwise)", "pallas_call #2 (s3_offline_scan)"],
        "inside_flops": {"exp": 30.0},
        "outside_flops": {"sort": 10.0},
    }
    assert parts_line(work) == (
        "2 kernels (s1_offline_rowwise, s3_offline_scan); left to XLA: sort (25% of the counted flops)"
    )
    one = {"num_pallas_calls": 1, "data_flow_pallas_calls": ["pallas_call #1 (offline_fused)"]}
    assert parts_line(one | {"inside_flops": {"exp": 1.0}}) == "1 kernel (offline_fused); nothing left to XLA"


def test_the_judge_accepts_the_sort_left_to_xla_and_refuses_the_softmax_left_too(tmp_path):
    """work_outside_kernel as it stands: the composite's XLA part (the sort, a neg) is a small share of the
    counted flops; the same program with only the last kernel kept (softmax, cumsum in XLA) is refused."""
    program = program_of(REFS / "nucleus_filter_reference.py")
    template, _, _ = program_template(program)
    mod = written(tmp_path / "nucleus_kernel.py", template.render(_smallest(template), "program"))
    ref = written(tmp_path / "nucleus_ref.py", (REFS / "nucleus_filter_reference.py").read_text())
    specs = jax.eval_shape(lambda: ref.create_inputs(size="small"))
    reference = census_of(jax.make_jaxpr(ref.workload)(*specs))
    census = census_of(jax.make_jaxpr(mod.workload)(*specs))
    assert census.num_pallas_calls == 3 and set(census.outside_flops) == {"sort", "neg"}
    assert work_verdict(census, reference) is None
    # the adversary: the softmax and the scan in XLA, one kernel for the renormalisation alone
    lazy = mod.workload.__globals__["s5_workload"]

    def plain_then_kernel(logits):
        probs = jax.nn.softmax(logits.astype(jnp.float32) / ref.TEMPERATURE, axis=-1)
        ranked = -jnp.sort(-probs, axis=-1)
        return lazy(jnp.cumsum(ranked, axis=-1), ranked)

    verdict = work_verdict(census_of(jax.make_jaxpr(plain_then_kernel)(*specs)), reference)
    assert verdict is not None and "outside the pallas_calls" in verdict


@pytest.mark.slow  # interpret mode at small for three references
@pytest.mark.parametrize(
    "name", ["moe_router_topk", "sampling_topk", "nucleus_filter", "scatter_add_rmsnorm"]
)
def test_each_composite_matches_its_reference_in_interpret_mode(tmp_path, name):
    ref = REFS / f"{name}_reference.py"
    template, _, _ = program_template(program_of(ref))
    mod = written(tmp_path / f"{name}_kernel.py", template.render(_smallest(template), "program"))
    ref_mod = written(tmp_path / f"{name}_ref.py", ref.read_text())
    for seed in (3, 4):
        inputs = ref_mod.create_inputs(size="small", key=jax.random.key(seed))
        got, want = _interpret(mod, inputs), ref_mod.workload(*inputs)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            if jnp.issubdtype(w.dtype, jnp.integer):
                assert np.array_equal(np.asarray(g), np.asarray(w))
            else:
                rtol, atol = ref_mod.CONFIG["rtol"], ref_mod.CONFIG["atol"]
                assert np.allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=rtol, atol=atol)


@pytest.mark.slow  # interpret mode on hand-made rows
def test_in_kernel_top_k_takes_ties_in_index_order_and_ranks_minus_inf(tmp_path):
    """The rounds compare int32 keys of the f32 bits: -inf ranks above a taken entry and ties go to the lowest
    index, as lax.top_k's do (values and indices exactly equal)."""
    template, _, _ = program_template(program_of(REFS / "sampling_topk_reference.py"))
    mod = written(tmp_path / "topk_kernel.py", template.render(_smallest(template), "program"))
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 3, size=(16, 2048)).astype(np.float32)  # few distinct values: ties everywhere
    x[0, :] = -np.inf
    x[0, 7] = 1.0
    x[1, 100:] = -np.inf
    x[2, :] = 0.0
    x[2, ::2] = -0.5
    logits = jnp.asarray(x, jnp.bfloat16)
    got, want = _interpret(mod, (logits,)), jax.lax.top_k(logits, 50)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
