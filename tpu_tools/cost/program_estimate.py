"""One static estimate for a whole traced program: the candidate's and the reference's are costed alike.

The suite's speedup vs the XLA baseline divides two estimates, so both must come from the same code
with the same inputs: the program's pallas_calls (costed with the jaxpr's counted work), or, for plain
JAX, the TPU-compiled program costed fusion by fusion (`fusions.py`: each fusion bound on its own, summed,
plus a per-program cost), with the old whole-program roofline beside it (flops: the reference's count
or XLA's, the larger; bytes: XLA's count for the TPU-compiled program, never less than the inputs and
outputs). Without a TPU compile, that roofline alone. Never a kernel's own `pl.CostEstimate` alone
(the caller drops those it distrusts).
"""

from __future__ import annotations

from collections.abc import Sequence

from maxkernel.tpu_tools.cost.estimate import StaticEstimate, estimate_pallas
from maxkernel.tpu_tools.cost.fusions import FusionTable
from maxkernel.tpu_tools.hardware.chips import ChipSpec, get_chip
from maxkernel.tpu_tools.problem.pallas_info import PallasCallInfo


def tpu_cost(fn, shapes, target, mesh_spec=None) -> dict[str, float]:
    """XLA's cost analysis of `fn` compiled for the TPU target's compile-only devices ({} if it cannot)."""
    return xla_program_cost(fn, shapes, target, mesh_spec)[0]


def estimate_program(
    jaxpr,
    calls: Sequence[PallasCallInfo],
    chip: str | ChipSpec,
    *,
    reference_flops: float | None,
    xla_flops: float | None,
    io_bytes: float | None,
    xla_tpu_cost: dict[str, float] | None = None,
    xla_fusions: FusionTable | None = None,
    input_values: Sequence | None = None,
) -> StaticEstimate:
    """The labeled estimate of `jaxpr` on `chip` (its `calls` already found and vetted by the caller).
    `input_values`: per input, its values where known (data_work.py: data-dependent work from them)."""
    if calls:
        from maxkernel.tpu_tools.cost.data_work import call_data, data_dependent
        from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost  # the estimate costs the whole program

        data = None
        given = input_values is not None and any(v is not None for v in input_values)
        if given or any(data_dependent(c) for c in calls):
            try:  # no values given: the program's own constant tables may still decide them
                data = call_data(jaxpr, list(input_values or ()))
            except Exception:  # noqa: BLE001 - without them the bounds stand, and the notes say so
                data = None
            if data is not None and len(data) != len(calls):
                data = None
        return estimate_pallas(
            list(calls),
            chip,
            total_flops=reference_flops or None,
            program=program_cost(jaxpr, data),
            data=data,
        )
    tpu = xla_tpu_cost or {}
    flops = max(reference_flops or 0.0, xla_flops or 0.0, tpu.get("flops", 0.0))
    hbm = max(float(io_bytes or 0), tpu.get("bytes accessed", 0.0))
    est = estimate_pallas([], chip, total_flops=flops, total_bytes=hbm)
    if xla_fusions is not None:  # the program XLA emitted, fusion by fusion; the roofline only beside it
        return xla_estimate(xla_fusions, chip, old_roofline_us=est.roofline_time_us)
    if tpu.get("bytes accessed", 0.0) > float(io_bytes or 0):
        est.assumptions.append(
            "HBM bytes: XLA's cost analysis of the program compiled for the TPU target (its intermediates)"
        )
    return est


def xla_estimate(
    table: FusionTable, chip: str | ChipSpec, *, old_roofline_us: float | None = None
) -> StaticEstimate:
    """The estimate of a plain-JAX program: its fusions' times summed, the old whole-program roofline beside it."""
    from maxkernel.tpu_tools.cost.estimate import default_scoped_vmem_bytes

    c = chip if isinstance(chip, ChipSpec) else get_chip(chip)
    by_bound: dict[str, float] = {}
    for f in table.fusions:
        by_bound[f.bound] = by_bound.get(f.bound, 0.0) + f.estimated_time_us
    bound = max(by_bound, key=lambda b: by_bound[b]) if by_bound else "overhead"
    old = old_roofline_us if old_roofline_us is not None else table.whole_program_roofline_us
    top = table.top(3)
    heavy = ", ".join(f"{f.name} {f.estimated_time_us:.3g} us ({f.bound})" for f in top)
    return StaticEstimate(
        tier=table.tier,
        tier_note=table.note,
        chip=c.name,
        estimated_time_us=table.total_us,
        bound=bound,  # type: ignore[arg-type]
        roofline_time_us=old,
        fraction_of_roofline=min(1.0, old / table.total_us) if table.total_us > 0 else 1.0,
        hbm_bytes_moved=int(table.bytes_accessed),
        flops=table.flops,
        steps=0,
        vmem_bytes_needed=0,
        vmem_capacity_bytes=c.vmem_bytes,
        vmem_scoped_limit_bytes=default_scoped_vmem_bytes(c),
        fits_vmem=True,
        above_scoped_vmem_limit=False,
        padding_waste_fraction=0.0,
        per_call=[],
        xla_fusions=table,
        launch_us=table.program_overhead_us,
        reason=(
            f"no pallas_call: XLA's TPU program costed fusion by fusion, {len(table.fusions)} ops summed + "
            f"{table.program_overhead_us:g} us per program (whole-program roofline {old:.3g} us); slowest: {heavy}"
        ),
        assumptions=table.assumptions,
    )


def xla_program_cost(
    fn, shapes, target, mesh_spec=None, why: list[str] | None = None
) -> tuple[dict[str, float], FusionTable | None]:
    """Compile `fn` for the TPU target once: XLA's own cost analysis and the per-fusion table ({}, None if it
    cannot; then `why`, if given, gets the compiler's reason: a program that does not fit the chip's HBM is a
    fact about the baseline, not a gap in the estimate)."""
    from maxkernel.tpu_tools.cost.fusions import cost_fusions
    from maxkernel.tpu_tools.cost.llo_dump import active_dump, compile_with_dump
    from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of
    from maxkernel.tpu_tools.hardware import mesh

    programs = []
    try:
        # The LLO dump when this process has it on (a job that switched it on before its backend was up): the
        # program is then costed from its own schedule (tier llo). Never switched on here: it would stay on
        # for every later compile of a long-lived process.
        dump = active_dump()
        args, scope = mesh.aot_args(target, shapes, mesh_spec)
        with scope:
            compiled, programs, _ = compile_with_dump(fn, args, dump)
    except Exception as e:  # no libtpu, or the program does not compile there: the caller's counts stand
        if why is not None:
            why.append(
                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:400]
            )
        return {}, None
    try:
        chip = getattr(target, "chip", None)
        table = cost_fusions(compiled, chip, programs or None) if chip is not None else None
    except Exception:  # an HLO we cannot read: the whole-program roofline stands
        table = None
    return cost_analysis_of(compiled), table
