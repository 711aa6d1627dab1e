"""An estimate-only evaluator: trace the kernel in-process and rank it by the static TPU estimate.

For benchmarks and offline dry runs, where compiling and validating every candidate would cost more
than the question asked ("which algorithm finds the best tile config in fewest evaluations"). It uses
tpu_tools directly (load the candidate, trace it, find its pallas_calls, `estimate_pallas`), the same
path the profile job takes for its `static_estimate`. Nothing is validated: verdicts say so, and the
time is always labeled `estimate`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from maxkernel.clients.search.evaluator import EvalTask
from maxkernel.clients.search.graph import NodeVerdict, sha256_text


class EstimateEvaluator:
    """valid = traces, output shape matches, and fits the chip's scoped VMEM; time = static estimate."""

    name = "estimate"

    def __init__(self, reference: str, target: str = "tpu-v6e", size: str | None = None) -> None:
        import jax

        from maxkernel.tpu_tools.problem.reference import load_reference

        self.ref = load_reference(reference)
        size = size or self.ref.default_size()[0]  # the target size: the production size by default
        self.target, self.size = target, size
        self.shapes = self.ref.input_shapes(size)
        self.expected = jax.eval_shape(self.ref.workload, *self.shapes)
        self.flops = self.ref.get_flops(size)
        self._dir = tempfile.TemporaryDirectory(prefix="mk-estimate-")
        self.calls = 0

    async def tool_versions(self) -> str:
        from importlib.metadata import version

        return f"estimate-jax-{version('jax')}"

    def estimate(self, source: str) -> NodeVerdict:
        import jax

        from maxkernel.tpu_tools.cost.estimate import estimate_pallas
        from maxkernel.tpu_tools.judged.candidate import load_candidate
        from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

        self.calls += 1
        started = time.perf_counter()
        path = Path(self._dir.name) / f"k_{sha256_text(source)[:16]}.py"
        path.write_text(source, encoding="utf-8")

        def verdict(status: str, **kw) -> NodeVerdict:
            return NodeVerdict(
                status=status, server=self.name, duration_s=round(time.perf_counter() - started, 4), **kw
            )

        try:
            cand = load_candidate(str(path))
            jaxpr = jax.make_jaxpr(cand.workload)(*self.shapes)
        except Exception as e:
            return verdict("invalid", stopped_at="compile", failure=f"trace: {type(e).__name__}: {e}"[:2000])
        out = [(tuple(a.shape), str(a.dtype)) for a in jaxpr.out_avals]
        want = [(tuple(a.shape), str(a.dtype)) for a in jax.tree_util.tree_leaves(self.expected)]
        if out != want:
            return verdict(
                "invalid", stopped_at="compile", failure=f"output {out} differs from reference {want}"
            )
        try:
            from maxkernel.tpu_tools.cost.jaxpr_cost import (
                program_cost,
            )  # the whole program: work moved to jnp pays

            calls = find_pallas_calls(jaxpr)
            # data-dependent work (run-time grids, prefetch tables, loops) from the reference's inputs
            data = self._data(jaxpr, len(calls)) if calls else None
            est = estimate_pallas(
                calls, self.target, total_flops=self.flops, program=program_cost(jaxpr, data), data=data
            )
        except Exception as e:
            return verdict(
                "invalid", stopped_at="profile", failure=f"estimate: {type(e).__name__}: {e}"[:2000]
            )
        profile = {"static_estimate": est.model_dump(mode="json"), "note": "estimate only: not validated"}
        xla = self.xla_estimate()
        if xla is not None:  # the XLA baseline beside it: the reference's own program, same chip
            profile["reference_estimate"] = xla
        if est.above_scoped_vmem_limit:
            return verdict(
                "invalid", stopped_at="compile", failure="above the scoped VMEM limit", profile=profile
            )
        return verdict("valid", time_us=est.estimated_time_us, time_label="estimate", profile=profile)

    def _data(self, jaxpr, n_calls: int) -> list | None:
        """Each pallas_call's run-time facts from the reference's small integer inputs and the program's
        own constant tables (a causal kernel's block list built from shapes), as `maxkernel estimate` has
        them (None: they could not be had)."""
        import jax
        import numpy as np

        from maxkernel.tpu_tools.cost.data_work import call_data, small_int_inputs

        if not hasattr(self, "_values"):
            leaves = jax.tree_util.tree_leaves(self.shapes)
            try:
                got = small_int_inputs(lambda: self.ref.create_inputs(self.size, 0), leaves)
            except Exception:  # noqa: BLE001 - without values the bounds stand, and the notes say so
                got = {}
            self._values = [np.asarray(got[i], s.dtype) if i in got else None for i, s in enumerate(leaves)]
        try:  # with no values, only a kernel's constant prefetch tables are evaluated
            data = call_data(jaxpr, self._values)
        except Exception:  # noqa: BLE001
            return None
        return data if len(data) == n_calls else None

    def xla_estimate(self) -> dict | None:
        """The reference's own program estimated for the target as the profile job does (once; None if it
        cannot be): what the summaries print beside the kernel's estimate."""
        if not hasattr(self, "_xla"):
            self._xla = None
            try:
                import jax
                import numpy as np

                from maxkernel.tpu_tools.cost.program_estimate import estimate_program, xla_program_cost
                from maxkernel.tpu_tools.hardware.targets import parse_target

                tgt = parse_target(self.target)
                shapes = jax.tree_util.tree_leaves(self.shapes)
                jaxpr = jax.make_jaxpr(self.ref.workload)(*shapes)
                nbytes = sum(
                    int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in [*shapes, *jaxpr.out_avals]
                )
                cost, fusions = xla_program_cost(self.ref.workload, shapes, tgt)
                est = estimate_program(
                    jaxpr,
                    [],
                    tgt.chip or self.target,
                    reference_flops=self.flops,
                    xla_flops=cost.get("flops"),
                    io_bytes=nbytes,
                    xla_tpu_cost=cost or None,
                    xla_fusions=fusions,
                )
                self._xla = est.model_dump(mode="json")
            except Exception:  # noqa: BLE001 - no baseline: the summary says there is none
                self._xla = None
        return self._xla

    async def evaluate(self, source: str, task: EvalTask, *, seeds: int | None = None) -> NodeVerdict:
        return self.estimate(source)
