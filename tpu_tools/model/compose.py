"""A model step with kernels in place of some of its regions, validated end to end as a candidate.

The composed step is written as one candidate file: the model's other equations re-emitted as plain JAX
(problem/emit.py, mosaic=False, one body per size), each replaced region instance a call of its kernel
file's `workload` (copied beside it), with the region's output shapes and dtypes checked at the call.
That file never imports the model: it is validated against the model under the judge's rules like any
candidate (Evaluator.validate: fresh random seeds, the small check size, the sandbox, the candidate child
never sees the reference). Plain JAX is allowed in it (the model's own equations are plain JAX); each
kernel's own Pallas checks belong to its region's suite, not here.

Numerics: the judge's own rule (judge/error_rule.py), against the model's own upcast oracle: the composed
step passes where it is within the model's tolerance of the model as the target computes it, or where its
error against the oracle is within 2x the model's own. The tolerance does not grow with the number of
replaced instances: a kernel as accurate as the region it replaces keeps the step as accurate as the model.

Once it matches, the step is estimated at the target size on a TPU target (Amdahl, nothing measured):
before, each replaced region's hotspot estimate x its count, and the whole step's hotspot total; after,
each kernel's static estimate (Evaluator.estimate, against the region's extracted reference at the target
size) x the count, and step - sum(before of the replaced) + sum(after of the replaced).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.errors import MaxkernelError, ReferenceFailure, UsageError

_ID_RE = re.compile(r"[^0-9A-Za-z_]")
# The composed step is a whole model step in interpret mode: at small it takes seconds, at a larger check
# size minutes, so compose checks at small unless told otherwise (--check-size).
COMPOSE_CHECK_SIZES = ("small",)
COMPOSE_CHECK_SIZES_TEXT = "small: the whole step runs in interpret mode"


class ComposeFailure(MaxkernelError):
    """The composed step could not be written (an equation the emitter has no form for)."""


def kernel_module(region_id: str) -> str:
    return "k_" + _ID_RE.sub("_", region_id)


def parse_kernels(specs: list[str]) -> dict[str, str]:
    """`ID=kernel.py` pairs as {region id: absolute path}; UsageError on a malformed or missing one."""
    out: dict[str, str] = {}
    for spec in specs:
        rid, sep, path = spec.partition("=")
        if not sep or not rid.strip() or not path.strip():
            raise UsageError(
                f"--kernel {spec!r}: expected ID=kernel.py (a region id from `maxkernel hotspots`)"
            )
        p = Path(path).expanduser()
        if not p.is_file():
            raise UsageError(f"--kernel {spec!r}: kernel file not found: {path}")
        if rid in out:
            raise UsageError(f"--kernel: region {rid!r} given twice")
        out[rid.strip()] = str(p.resolve())
    if not out:
        raise UsageError("give at least one --kernel ID=kernel.py")
    return out


def _step_body(flat, insts, replaced: dict[int, str], fn_name: str) -> list[str]:
    from maxkernel.tpu_tools.model.regions import _specs
    from maxkernel.tpu_tools.problem.emit import body_lines, unsupported_ops

    specs = _specs(flat)
    lines = [f"def {fn_name}({', '.join(flat.program.input_names)}):"]
    i, n = 0, len(flat.equations)
    starts = {inst.start: inst for inst in insts if inst.index in replaced}
    while i < n:
        inst = starts.get(i)
        if inst is not None:
            rid = replaced[inst.index]
            want = [(list(specs[o].shape), specs[o].dtype) for o in inst.outputs]
            outs = ", ".join(inst.outputs)
            lines.append(f"    {outs}, = _kernel({rid!r}, {want!r}, {', '.join(inst.inputs)})")
            i = inst.stop
            continue
        j = i
        while j < n and j not in starts:
            j += 1
        eqns = flat.equations[i:j]
        program = {"equations": [e.model_dump() for e in eqns], "census": {e.primitive: 1 for e in eqns}}
        if bad := unsupported_ops(program, mosaic=False):
            raise ComposeFailure(f"the emitter has no plain-JAX form for {', '.join(bad)}")
        lines += ["    " + ln for ln in body_lines(program, mosaic=False)]
        i = j
    outs = [o[4:] if o.startswith("lit:") else o for o in flat.program.outputs]
    lines.append(f"    return ({', '.join(outs)},)")
    return lines


def composed_source(reference: str, kernels: dict[str, str]) -> dict[str, Any]:
    """The composed step's source (pool job: the model is user code), or {"error": ...}."""
    from maxkernel.tpu_tools.model.extract import _find, _trace
    from maxkernel.tpu_tools.problem.reference import load_reference
    from maxkernel.tpu_tools.problem.tolerances import choose_tolerance

    try:
        try:
            ref = load_reference(reference)
        except ReferenceFailure as e:
            raise UsageError(str(e)) from None
        sizes = ref.info.sizes
        bodies, keys, single = [], [], True
        for size in dict.fromkeys([s for s in ("full", "small") if s in sizes] or sizes[:1]):
            flat, insts, merged = _trace(ref, size)
            replaced = {}
            for rid in kernels:
                reg = _find(merged, rid, ref.info.name, size)
                replaced.update({k: rid for k in reg.instances})
            fn = f"step_{size}"
            bodies.append("\n".join(_step_body(flat, insts, replaced, fn)))
            keys.append((tuple(tuple(s.shape) for s in flat.program.inputs), fn))
            single = (
                flat.out_tree is not None and flat.out_tree.num_leaves == 1 and flat.out_tree.num_nodes == 1
            )
    except (UsageError, ComposeFailure) as e:
        return {"error": str(e)}
    loads = "\n".join(f"_KERNELS[{rid!r}] = _load({kernel_module(rid)!r})" for rid in kernels)
    table = ",\n".join(f"    {shapes!r}: {fn}" for shapes, fn in keys)
    ret = "out[0]" if single else "out"
    text = (
        f'''"""Model {ref.info.name!r} with kernels for {", ".join(kernels)}: composed by `maxkernel compose`.
Its other equations are the model's, re-emitted as plain JAX; it does not import the model."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np  # noqa: F401  (literals)
from jax import lax

_HERE = os.path.dirname(os.path.abspath(__file__))
_KERNELS = {{}}


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


{loads}


def _kernel(rid, want, *inputs):
    out = _KERNELS[rid].workload(*inputs)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    got = [(list(o.shape), str(o.dtype)) for o in out]
    if got != [(s, d) for s, d in want]:
        raise ValueError(
            f"the kernel for region {{rid!r}} returns {{got}}; the region makes {{[(s, d) for s, d in want]}}"
        )
    return out


'''
        + "\n\n\n".join(bodies)
        + f"""


_STEPS = {{
{table},
}}


def workload(*inputs):
    out = _STEPS[tuple(tuple(x.shape) for x in jax.tree_util.tree_leaves(inputs))](*jax.tree_util.tree_leaves(inputs))
    return {ret}
"""
    )
    dtype = flat.program.out_specs[0].dtype if flat.program.out_specs else "float32"
    base = choose_tolerance(str(dtype), ref_atol=ref.info.atol, ref_rtol=ref.info.rtol)
    return {
        "source": text,
        "model": ref.info.name,
        "instances": len(replaced),
        "atol": base.atol,
        "rtol": base.rtol,
        "tolerance_source": base.source,
    }


class RegionEstimate(BaseModel):
    """One replaced region, before and after, at the target size: estimates, never measurements."""

    region: str
    count: int = Field(description="instances of the region in the step")
    kernel: str = Field(description="the kernel file")
    reference: str | None = Field(
        None, description="the region's extracted reference the kernel was estimated on"
    )
    before_each_us: float = Field(description="the region's hotspot estimate, one instance")
    before_us: float = Field(description="before_each_us x count")
    before_tier: str
    after_each_us: float | None = Field(None, description="the kernel's static estimate, one call")
    after_us: float | None = Field(None, description="after_each_us x count")
    after_tier: str | None = None
    speedup: float | None = Field(None, description="before_us / after_us (estimate)")
    note: str = ""


class StepEstimate(BaseModel):
    """The whole step before and after, by Amdahl's arithmetic over the replaced regions (estimate)."""

    basis: Literal["estimate"] = "estimate"
    tier: str = Field(description="the estimate's tier: the step's (hotspots) and the kernels' (estimate)")
    target: str
    size: str = Field(description="the target size the step and every kernel were estimated at")
    step_before_us: float = Field(description="the whole step's hotspot estimate")
    replaced_before_us: float = Field(description="sum of before_us over the regions with an after")
    replaced_after_us: float = Field(description="sum of after_us over the same regions")
    step_after_us: float = Field(description="step_before_us - replaced_before_us + replaced_after_us")
    speedup: float = Field(description="step_before_us / step_after_us (estimate)")
    arithmetic: str = Field(description="the sum, written out")
    composed_us: float | None = Field(
        None,
        description="the composed step compiled at the target size and estimated as one program: its kernels "
        "from their own jaxprs, the model's other ops fusion by fusion as XLA compiled them around the kernels",
    )
    composed_tier: str | None = None
    composed_speedup: float | None = Field(None, description="step_before_us / composed_us (estimate)")
    composed_note: str = Field(
        "", description="how the one-program estimate compares with Amdahl's, or why none"
    )
    regions: list[RegionEstimate]
    notes: list[str] = Field(default_factory=list)


class ComposeReport(BaseModel):
    kind: Literal["compose"] = "compose"
    model: str
    target: str
    kernels: dict[str, str] = Field(description="region id -> kernel file")
    composed_path: str
    ok: bool
    verdict: str = Field(description="the end-to-end validation's verdict, from what ran")
    validation: dict[str, Any] = Field(description="the ValidationReport of the composed step vs the model")
    tolerance_note: str
    estimate: StepEstimate | None = Field(
        None, description="before/after at the target size (a static estimate): only once validation passes"
    )
    estimate_note: str = Field("", description="why there is no estimate, when there is none")


def compose(
    evaluator: Any,
    reference: str,
    kernels: dict[str, str],
    out_dir: str,
    *,
    target: str = "cpu",
    size: str | None = None,
    check_sizes: list[str] | None = None,
    references: dict[str, str] | None = None,
    hotspots: Any = None,
    seeds: int = 3,
    seed_offset: int | None = None,
    timeout_s: float | None = None,
    on_progress: Any = None,
    cancel: Any = None,
) -> ComposeReport:
    """Write the composed step to `out_dir` (new) and validate it against the model under the judge's rules.

    `size` is the target size (None: the model's production size): the composed step compiles there and,
    once it matches, the before/after estimate is made there on a TPU `target`. `check_sizes` is where it
    runs in interpret mode against the model (None: COMPOSE_CHECK_SIZES, small: a whole step interpreted
    at a larger size takes minutes).
    `references` maps region ids to their extracted references (else each is extracted into `out_dir`);
    `hotspots` is the model's HotspotReport at the target and target size (else it is made here)."""
    from maxkernel.tpu_tools.judge.outcomes import abs_reference

    out = Path(out_dir)
    if out.exists():
        raise UsageError(f"{out} exists; compose writes a new directory")
    if on_progress:
        on_progress("trace the model and write the composed step")
    outcome = evaluator._run(
        "maxkernel.tpu_tools.model.compose:composed_source",
        {"reference": abs_reference(reference), "kernels": kernels},
        timeout_s=timeout_s,
        on_progress=on_progress,
        cancel=cancel,
    )
    if outcome.status != "ok" or outcome.result is None:
        raise UsageError(f"compose of {reference} ended with {outcome.status}: {outcome.message}")
    if "error" in outcome.result:
        raise UsageError(outcome.result["error"])
    checks = list(check_sizes or COMPOSE_CHECK_SIZES)
    out.mkdir(parents=True)
    try:
        for rid, path in kernels.items():
            shutil.copyfile(path, out / f"{kernel_module(rid)}.py")
        composed = out / "composed.py"
        composed.write_text(outcome.result["source"])
        if on_progress:
            on_progress(
                f"validate the composed step against the model ({seeds} fresh seeds, at {', '.join(checks)})"
            )
        res = outcome.result
        report = evaluator.validate(
            str(composed), reference, target, size, check_sizes=checks, seeds=seeds, seed_offset=seed_offset,
            allow_plain_jax=True, timeout_s=timeout_s, on_progress=on_progress, cancel=cancel,
        )  # fmt: skip
        shape_error = _kernel_shape_error(report)
        if shape_error:
            raise UsageError(shape_error)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # bad input: nothing written
        raise
    summary = report.failure.summary if report.failure is not None else ""
    verdict = (
        f"the composed step matches the model on seeds {report.seeds} at {', '.join(checks)}"
        if report.ok
        else f"the composed step does not match the model: {summary}"
    )
    result = ComposeReport(
        model=outcome.result["model"],
        target=target,
        kernels=kernels,
        composed_path=str(composed.resolve()),
        ok=report.ok,
        verdict=verdict,
        validation=report.model_dump(mode="json"),
        tolerance_note=_rule_note(report, res),
    )
    if not report.ok:
        result.estimate_note = "no estimate: the composed step does not match the model"
    elif not target.startswith("tpu-"):
        result.estimate_note = (
            f"no estimate: {target!r} is not a TPU target (give --target tpu-v5e, tpu-v6e, ...)"
        )
    else:
        result.estimate = estimate_step(
            evaluator, reference, kernels, out, target=target, size=size,
            references=references, hotspots=hotspots, timeout_s=timeout_s, on_progress=on_progress,
            cancel=cancel,
        )  # fmt: skip
    return result


def estimate_step(
    evaluator: Any,
    reference: str,
    kernels: dict[str, str],
    out: Path,
    *,
    target: str,
    size: str | None = None,
    references: dict[str, str] | None = None,
    hotspots: Any = None,
    timeout_s: float | None = None,
    on_progress: Any = None,
    cancel: Any = None,
) -> StepEstimate:
    """Amdahl at the target size: the hotspot table's step and regions before, each kernel's static
    estimate (on its region's extracted reference) after. A kernel with no estimate keeps its region's
    before in the step, and its row says why."""
    from maxkernel.tpu_tools.cost.fusions import PROGRAM_OVERHEAD_US
    from maxkernel.tpu_tools.model.extract import extract_in_child
    from maxkernel.tpu_tools.model.hotspots import hotspots_in_child

    hs = hotspots
    if hs is None:
        hs = hotspots_in_child(
            evaluator,
            reference,
            target,
            size,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )
    references = dict(references or {})
    rows: list[RegionEstimate] = []
    kernel_tiers: set[str] = set()
    for rid, kernel_path in kernels.items():
        cost = hs.region(rid)
        row = RegionEstimate(
            region=rid, count=cost.region.count, kernel=kernel_path, before_each_us=cost.time_us,
            before_us=cost.total_us, before_tier=cost.tier,
        )  # fmt: skip
        rows.append(row)
        ref = references.get(rid)
        if ref is None:
            ref = str(out / "regions" / f"{kernel_module(rid)[2:]}.py")
            try:
                extract_in_child(evaluator, reference, rid, ref, timeout_s=timeout_s, on_progress=on_progress,
                                 cancel=cancel)  # fmt: skip
            except UsageError as e:
                row.note = f"no estimate: the region could not be extracted: {e}"
                continue
        row.reference = ref
        if on_progress:
            on_progress(f"estimate the kernel for {rid} on {target} at size {hs.size}")
        est = evaluator.estimate(
            kernel_path, ref, target, hs.size, timeout_s=timeout_s, on_progress=on_progress, cancel=cancel
        )
        if not est.ok or est.estimate is None:
            summary = est.failure.summary if est.failure is not None else "no estimate"
            row.note = f"{summary}: the step keeps the region's own time"
            continue
        e = est.estimate
        if not e.per_call:
            # plain JAX (a region's own extracted code): XLA compiles it into the step as it compiles the
            # model's region, fused with its neighbours, so its time in the step is the region's own. Costed
            # alone it would pay a program launch and lose those fusions: 0.88x for the same code (Gemma 2)
            row.after_each_us = row.before_each_us
            row.note = (
                f"plain JAX, no kernel call: costed as the region's own time in the step (alone it is "
                f"{e.estimated_time_us:.4g} us, a program of its own); the one-program estimate below is its check"
            )
        else:
            # a kernel called inside the step pays no program launch of its own: the step's is in step_us
            launch = e.launch_us if e.launch_us is not None else PROGRAM_OVERHEAD_US
            row.after_each_us = max(0.0, e.estimated_time_us - launch)
            row.note = (
                f"the kernel's estimate {e.estimated_time_us:.4g} us less the {launch:.3g} us program launch"
            )
        row.after_us = row.after_each_us * row.count
        row.after_tier = est.estimate.tier
        row.speedup = row.before_us / row.after_us if row.after_us > 0 else None
        kernel_tiers.add(est.estimate.tier)
    done = [r for r in rows if r.after_us is not None]
    before = sum(r.before_us for r in done)
    after = sum(r.after_us or 0.0 for r in done)
    step_after = hs.step_us - before + after
    terms = lambda xs: " + ".join(f"{e:.4g}x{c}" for e, c in xs) or "0"  # noqa: E731
    arithmetic = (
        f"after = step - sum(before) + sum(after) = {hs.step_us:.4g} - ({terms((r.before_each_us, r.count) for r in done)}) "
        f"+ ({terms((r.after_each_us, r.count) for r in done)}) = {hs.step_us:.4g} - {before:.4g} + {after:.4g} "
        f"= {step_after:.4g} us; speedup {hs.step_us:.4g} / {step_after:.4g} = {hs.step_us / step_after:.3g}x"
    )
    tier = f"step: {hs.tier}; kernels: {', '.join(sorted(kernel_tiers)) or 'none'}"
    notes = [
        "every time is a static estimate at the target size; nothing ran on a chip",
        "fusions and kernels are summed one after another: no overlap, no layout copies at a kernel's boundary",
    ]
    notes += [f"{r.region}: {r.note}" for r in rows if r.note]
    step = StepEstimate(
        tier=tier, target=hs.target, size=hs.size, step_before_us=hs.step_us, replaced_before_us=before,
        replaced_after_us=after, step_after_us=step_after, speedup=hs.step_us / step_after,
        arithmetic=arithmetic, regions=rows, notes=notes,
    )  # fmt: skip
    composed = out / "composed.py"
    if composed.is_file():
        if on_progress:
            on_progress(f"estimate the composed step as one program on {target} at size {hs.size}")
        whole = evaluator.estimate(
            str(composed),
            reference,
            target,
            hs.size,
            timeout_s=timeout_s,
            on_progress=on_progress,
            cancel=cancel,
        )
        _composed_estimate(step, whole, hs.step_us)
    return step


def _composed_estimate(step: StepEstimate, whole: Any, before_us: float) -> None:
    """Put the one-program estimate of the composed step beside Amdahl's sum, and say how far apart they are."""
    if not whole.ok or whole.estimate is None:
        why = whole.failure.summary if whole.failure is not None else "no estimate"
        step.composed_note = f"no one-program estimate of the composed step: {why}"
        return
    est = whole.estimate
    step.composed_us = est.estimated_time_us
    step.composed_tier = est.tier
    step.composed_speedup = before_us / est.estimated_time_us if est.estimated_time_us > 0 else None
    kernels = sum(c.estimated_time_us for c in est.per_call)
    rest = est.estimated_time_us - kernels
    amdahl_rest = step.step_before_us - step.replaced_before_us
    basis = (
        est.outside_kernel.basis
        if est.outside_kernel is not None
        else ("fusions" if est.xla_fusions is not None else "roofline")
    )
    step.composed_note = (
        f"the composed step as one program: {est.estimated_time_us:.4g} us (tier {est.tier}) against Amdahl's "
        f"{step.step_after_us:.4g} us ({est.estimated_time_us / step.step_after_us - 1:+.1%}): its "
        f"{len(est.per_call)} kernel call(s) {kernels:.4g} us (Amdahl's kernels {step.replaced_after_us:.4g} us), "
        f"everything else {rest:.4g} us (outside ops costed by {basis}, plus the launch; Amdahl's rest of the "
        f"model {amdahl_rest:.4g} us)"
    )


def _rule_note(report, res: dict) -> str:
    """How the step was judged, from what ran: the model's tolerance (not grown with the replaced
    instances), the model's numerics on the target, and the error rule's worst ratios."""
    tol = report.tolerance
    said = (
        f"the model's tolerance ({tol.source}: atol {tol.atol:g}, rtol {tol.rtol:g})"
        if tol is not None
        else f"the model's tolerance ({res['tolerance_source']}: atol {res['atol']:g}, rtol {res['rtol']:g})"
    )
    parts = [f"{said}, the same for {res['instances']} replaced region instance(s)"]
    if report.numerics is not None:
        parts.append(f"against the model {report.numerics.target}")
        if report.numerics.oracle:
            parts.append(f"or within {report.numerics.factor:g}x its error against {report.numerics.oracle}")
        elif report.numerics.oracle_missing:
            parts.append(report.numerics.oracle_missing)
    if report.error_summary:
        parts.append(report.error_summary)
    return "; ".join(parts)


def _kernel_shape_error(report) -> str | None:
    """A kernel whose outputs do not have its region's shapes: the caller's mistake (one line)."""
    f = report.failure
    text = f"{f.summary} {getattr(f, 'detail', '') or ''}" if f is not None else ""
    m = re.search(
        r"the kernel for region '([^']+)' returns (\[.*?\]); the region makes (\[.*?\])(?=\s|$|\n)", text
    )
    if m:
        return f"the kernel for region {m.group(1)!r} returns {m.group(2)}; the region makes {m.group(3)}"
    return None
