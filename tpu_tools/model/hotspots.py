"""A static profile of a model step on a TPU target: where the time goes, region by region.

Compile the whole step for the target (compile-only: libtpu off the chip, nothing runs), each region's
equations bound under a named scope of their own, so every fusion of the compiled program says in its
op_name metadata which region it came from. Cost the program fusion by fusion and add each region's
fusions up. Per region: flops and HBM bytes, the estimate and its tier, share of the step, bound, and
the headroom against its roofline (its own flops at peak, or its inputs and outputs once through HBM:
what a perfect fused kernel would take). Everything is an estimate and says so; on a chip, a profile of
the step is the truth (`measured`, a seam: not built here, no chip).
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.errors import ReferenceFailure, UsageError
from maxkernel.tpu_tools.model.regions import Region, RegionInstance

TAG = "mkregion"
_TAG_RE = re.compile(rf"{TAG}(\d+)")
SUM_TOLERANCE = 0.10  # regions must add up to the step's estimate within this, or the report says why


class RegionCost(BaseModel):
    """One merged region on the target; times are per instance unless named total."""

    region: Region
    fusions: list[str] = Field(description="compiled fusions attributed to one instance")
    flops: float = Field(description="per instance: the compiled fusions' flops (XLA's count)")
    hbm_bytes: float = Field(description="per instance: bytes the compiled fusions move through HBM")
    time_us: float = Field(description="per instance, estimate")
    total_us: float = Field(description="time_us x count")
    share: float = Field(description="total_us / the step's estimate")
    tier: str
    bound: Literal["compute", "memory", "overhead", "none"]
    roofline_us: float = Field(
        description="per instance: max(its jaxpr flops at peak, its inputs+outputs once through HBM)"
    )
    headroom: float = Field(description="time_us / roofline_us: what a perfect kernel could win, at most")
    fused_into: list[str] = Field(
        default_factory=list,
        description="regions whose fusions XLA put some of this one's ops in (costed there, not here)",
    )
    measured_us: float | None = Field(default=None, description="from a profile of the step on a chip")


class HotspotReport(BaseModel):
    kind: Literal["hotspots"] = "hotspots"
    model: str
    path: str
    target: str
    size: str
    shapes: list[str] = Field(description="the step's input shapes")
    compile_time_ms: float
    analysis_time_ms: float = Field(description="tracing, regions, fusion costs (not the compile)")
    tier: str = Field(
        description="the per-fusion estimate's tier: llo (compiler schedule) | model (fusion roofline)"
    )
    step_us: float = Field(description="the whole step's estimate")
    regions_us: float = Field(description="sum of every region's total_us")
    program_overhead_us: float = 0.0
    unattributed_us: float = Field(0.0, description="fusions no region's ops reached (XLA's own copies)")
    sum_ok: bool
    sum_note: str
    regions: list[RegionCost]
    instances: list[RegionInstance]
    notes: list[str] = Field(default_factory=list)

    def region(self, rid: str) -> RegionCost:
        from maxkernel.tpu_tools.model.regions import matching_id

        found = matching_id([r.region.id for r in self.regions], rid)
        for r in self.regions:
            if r.region.id == found:
                return r
        known = ", ".join(r.region.id for r in self.regions)
        raise UsageError(f"no region {rid!r} in {self.model}; its regions are: {known}")


def _owner(op_names: Sequence[str]) -> int | None:
    """The region instance a fusion's matmul came from, else the one most of its ops came from (ties: the
    later one, its consumer). A matmul fused with the next region's prologue is still the matmul's."""
    votes: collections.Counter[int] = collections.Counter()
    for n in op_names:
        if m := _TAG_RE.search(n):
            votes[int(m.group(1))] += 1000 if n.endswith(("dot_general", "conv_general_dilated")) else 1
    if not votes:
        return None
    top = max(votes.values())
    return max(k for k, v in votes.items() if v == top)


def _owners(fusions: Sequence[Any], hlo_text: str) -> dict[str, tuple[int | None, str]]:
    """Each costed op's region instance, and how it was found: `ops` (its own op_names), `reader` (XLA's
    own op, a prefetch or layout copy, given to the first region that reads its result), `writer` (else
    the region that made its operand), or (None, "none")."""
    from maxkernel.tpu_tools.cost.hlo_text import parse_hlo

    own = {f.name: _owner(f.op_names) for f in fusions}
    users: dict[str, list[str]] = collections.defaultdict(list)
    operands: dict[str, list[str]] = {}
    for comp in parse_hlo(hlo_text).computations.values():
        for ins in comp.instructions:
            operands[ins.name] = list(ins.operands)
            for o in ins.operands:
                users[o].append(ins.name)

    def search(start: str, edges: dict[str, list[str]]) -> int | None:
        seen, frontier = {start}, [start]
        while frontier:
            nxt = []
            for n in frontier:
                for u in edges.get(n, ()):
                    if u in seen:
                        continue
                    seen.add(u)
                    if own.get(u) is not None:
                        return own[u]
                    nxt.append(u)
            frontier = nxt
        return None

    out: dict[str, tuple[int | None, str]] = {}
    for name, o in own.items():
        if o is not None:
            out[name] = (o, "ops")
        elif (r := search(name, users)) is not None:
            out[name] = (r, "reader")
        elif (w := search(name, operands)) is not None:
            out[name] = (w, "writer")
        else:
            out[name] = (None, "none")
    return out


def _region_roofline(region: Region, chip) -> float:
    from maxkernel.tpu_tools.cost.estimate import roofline

    return roofline(region.flops, float(region.io_bytes), chip).time_us


def find_hotspots(reference: str, target: str, size: str | None = None) -> HotspotReport:
    """Trace, split, compile and cost `reference`'s step for `target` (in a pool child: user code)."""
    import jax

    from maxkernel.tpu_tools.cost.llo_dump import active_dump, compile_with_dump
    from maxkernel.tpu_tools.hardware import mesh
    from maxkernel.tpu_tools.hardware.targets import parse_target
    from maxkernel.tpu_tools.model import regions as regions_mod
    from maxkernel.tpu_tools.model.flat import evaluate, flatten
    from maxkernel.tpu_tools.pool.child import report_progress
    from maxkernel.tpu_tools.problem.reference import load_reference

    t0 = time.perf_counter()
    tgt = parse_target(target)
    if tgt.chip is None:
        raise UsageError(f"hotspots costs a TPU target; {target!r} is not one (try tpu-v5e or tpu-v6e)")
    chip = tgt.chip
    try:
        ref = load_reference(reference)
    except ReferenceFailure as e:
        raise UsageError(str(e)) from None
    size = size or ("full" if "full" in ref.info.sizes else ref.default_size()[0])
    if size not in ref.info.sizes:
        raise UsageError(f"model {ref.info.name!r} has no size {size!r}; it has {ref.info.sizes}")
    report_progress(f"trace {ref.info.name} at size {size}")
    try:
        shapes = ref.input_shapes(size)
        flat = flatten(ref.workload, shapes, name=ref.info.name, size=size)
    except Exception as e:
        raise UsageError(
            f"model {ref.info.name!r} does not trace: {type(e).__name__}: {str(e)[:300]}"
        ) from None
    insts = regions_mod.instances(flat)
    merged = regions_mod.merge(flat, insts)
    report_progress(
        f"traced in {time.perf_counter() - t0:.1f} s: {len(flat.equations)} equations, {len(insts)} region "
        f"instances, {len(merged)} regions; compile the step for {tgt.name} (XLA, off the chip)"
    )
    scopes: list[str | None] = [None] * len(flat.equations)
    for inst in insts:
        for i in range(inst.start, inst.stop):
            scopes[i] = f"{TAG}{inst.index}"
    leaves = jax.tree_util.tree_leaves(shapes)
    args, scope = mesh.aot_args(tgt, leaves)
    t_compile = time.perf_counter()
    with scope:
        compiled, programs, _ = compile_with_dump(
            lambda *xs: evaluate(flat, xs, scopes=scopes), args, active_dump()
        )
    compile_ms = (time.perf_counter() - t_compile) * 1e3
    report_progress(
        f"compiled in {compile_ms / 1e3:.1f} s; cost its fusions"
        + (
            f" ({len(programs)} programs' schedules dumped)"
            if programs
            else " (no schedule dump: model tier)"
        )
    )
    table, tier, notes = _fusion_table(compiled, chip, programs)
    report_progress(
        f"costed {len(table['fusions'])} fusions ({tier}); attribute them to the {len(merged)} regions"
    )
    per_inst: dict[int, list[Any]] = collections.defaultdict(list)
    unattributed = by_neighbour = 0.0
    owners = _owners(table["fusions"], compiled.as_text())
    for f in table["fusions"]:
        owner, how = owners[f.name]
        if owner is None:
            unattributed += f.estimated_time_us
        else:
            per_inst[owner].append(f)
            if how != "ops":
                by_neighbour += f.estimated_time_us
    # which instances' ops each costed op carries: a region fused into a neighbour's fusion shows it
    carried: dict[int, set[int]] = collections.defaultdict(set)
    for f in table["fusions"]:
        owner = owners[f.name][0]
        for n in f.op_names:
            if (m := _TAG_RE.search(n)) and owner is not None and int(m.group(1)) != owner:
                carried[int(m.group(1))].add(owner)
    inst_region = {i: reg.id for reg in merged for i in reg.instances}
    rows = []
    step_us = float(table["total_us"])
    for reg in merged:
        fs_all = [per_inst[i] for i in reg.instances]
        tot = sum(f.estimated_time_us for fs in fs_all for f in fs)
        per = tot / reg.count
        fs = fs_all[0]
        flops = sum(f.flops for fs_ in fs_all for f in fs_) / reg.count
        hbm = sum(f.bytes_accessed for fs_ in fs_all for f in fs_) / reg.count
        roof = _region_roofline(reg, chip)
        bounds = collections.Counter()
        for f in fs:
            bounds[f.bound] += f.estimated_time_us
        rows.append(
            RegionCost(
                region=reg,
                fusions=[f.name for f in fs],
                flops=flops,
                hbm_bytes=hbm,
                time_us=per,
                total_us=tot,
                share=tot / step_us if step_us else 0.0,
                tier=tier,
                bound=bounds.most_common(1)[0][0] if bounds else "none",  # type: ignore[arg-type]
                roofline_us=roof,
                headroom=per / roof if roof > 0 else 1.0,
                fused_into=sorted({inst_region[o] for i in reg.instances for o in carried[i]} - {reg.id}),
            )
        )
    rows.sort(key=lambda r: -r.total_us)
    from maxkernel.tpu_tools.cost.estimate import roofline

    for r in rows:  # what extract and compose can do with each region, said before anyone tries
        if not r.region.extractable:
            notes.append(f"{r.region.id}: not extractable: {r.region.extract_note}")
        if not r.region.composable:
            notes.append(f"{r.region.id}: not composable: {r.region.compose_note}")
    if all(r.region.extractable and r.region.composable for r in rows):
        notes.append("every region is extractable (plain JAX) and composable")

    for r in rows:  # a region costed below its own matmul floor: the per-fusion cost missed work
        floor = roofline(r.region.flops, 0.0, chip).time_us
        if not r.fused_into and floor > 0 and r.time_us < 0.9 * floor:
            notes.append(
                f"{r.region.id}: estimated {r.time_us:.4g} us, below its own matmul floor of {floor:.4g} us "
                f"({r.region.flops:.3g} jaxpr flops at peak): the per-fusion cost misses some of its work"
            )
    regions_us = sum(r.total_us for r in rows)
    overhead = float(table.get("program_overhead_us", 0.0))
    gap = abs(step_us - regions_us) / step_us if step_us else 0.0
    why = []
    if overhead:
        why.append(f"{overhead:.1f} us of fixed program cost belongs to no region")
    if unattributed:
        why.append(f"{unattributed:.1f} us of compiled ops reach no region's ops in either direction")
    if by_neighbour:
        notes.append(
            f"{by_neighbour:.1f} us of XLA's own ops (prefetches, layout copies: no op_name) are counted in "
            "the region that reads their result (else the one that made their operand)"
        )
    ok = gap <= SUM_TOLERANCE
    note = f"regions add up to {regions_us:.1f} us of the step's {step_us:.1f} us ({100 * (1 - gap) if regions_us <= step_us else 100 * (1 + gap):.1f}%)"
    if why:
        note += "; " + "; ".join(why)
    return HotspotReport(
        model=ref.info.name,
        path=ref.info.path,
        target=tgt.name,
        size=size,
        shapes=[f"{s.dtype}{list(s.shape)}" for s in leaves],
        compile_time_ms=compile_ms,
        analysis_time_ms=(time.perf_counter() - t0) * 1e3 - compile_ms,
        tier=tier,
        step_us=step_us,
        regions_us=regions_us,
        program_overhead_us=overhead,
        unattributed_us=unattributed,
        sum_ok=ok,
        sum_note=note,
        regions=rows,
        instances=insts,
        notes=notes,
    )


def _fusion_table(compiled, chip, programs=None) -> tuple[dict, str, list[str]]:
    """The compiled step costed fusion by fusion (tpu_tools/cost/fusions.py), from the compiler's own
    schedule (llo) where the compile dumped it."""
    from maxkernel.tpu_tools.cost.fusions import cost_fusions

    t = cost_fusions(compiled, chip, programs or None)
    notes = [t.note] if t.note else []
    notes += t.assumptions
    return (
        {
            "fusions": list(t.fusions),
            "total_us": t.total_us,
            "program_overhead_us": t.program_overhead_us,
            "whole_roofline_us": t.whole_program_roofline_us,
        },
        t.tier,
        notes,
    )


def hotspots_job(reference: str, target: str, size: str | None = None) -> dict[str, Any]:
    """Pool job: the HotspotReport as JSON, or {"error": ...} for the caller's mistake. The LLO dump is
    switched on first (a fresh child, no backend yet): the step is costed at the tier the composed step and
    the kernels are (llo), not the fusion model."""
    from maxkernel.tpu_tools.cost.llo_dump import enable_dump_for

    enable_dump_for(target)
    try:
        return find_hotspots(reference, target, size).model_dump(mode="json")
    except UsageError as e:
        return {"error": str(e)}


def hotspots_in_child(
    evaluator: Any,
    reference: str,
    target: str,
    size: str | None = None,
    *,
    timeout_s: float | None = None,
    on_progress: Any = None,
    cancel: Any = None,
) -> HotspotReport:
    """Run `find_hotspots` in a pool child (the model is user code); UsageError for the caller's mistakes."""
    from maxkernel.tpu_tools.judge.outcomes import abs_reference

    if on_progress:
        on_progress("trace, compile and cost the step")
    outcome = evaluator._run(
        "maxkernel.tpu_tools.model.hotspots:hotspots_job",
        {"reference": abs_reference(reference), "target": target, "size": size},
        timeout_s=timeout_s,
        on_progress=on_progress,
        cancel=cancel,
    )
    if outcome.status != "ok" or outcome.result is None:
        raise UsageError(f"hotspots of {reference} ended with {outcome.status}: {outcome.message}")
    if "error" in outcome.result:
        raise UsageError(outcome.result["error"])
    return HotspotReport.model_validate(outcome.result)
