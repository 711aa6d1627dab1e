"""One static estimate for a whole traced program: the candidate's and the reference's are costed alike.

The suite's speedup vs the XLA baseline divides two estimates, so both must come from the same code
with the same inputs: the program's pallas_calls (costed with the jaxpr's counted work), or, for plain
JAX, the roofline of its flops and HBM bytes. For plain JAX the bytes are XLA's own count for the
TPU-compiled program (`tpu_cost`: every intermediate it materializes, e.g. attention's scores), never
less than the inputs and outputs; flops are the reference's count or XLA's, the larger. Never a
kernel's own `pl.CostEstimate` alone (the caller drops those it distrusts).
"""

from __future__ import annotations

from collections.abc import Sequence

from maxkernel.tpu_tools.cost.estimate import StaticEstimate, estimate_pallas
from maxkernel.tpu_tools.hardware.chips import ChipSpec
from maxkernel.tpu_tools.problem.pallas_info import PallasCallInfo


def tpu_cost(fn, shapes, target, mesh_spec=None) -> dict[str, float]:
    """XLA's cost analysis of `fn` compiled for the TPU target's compile-only devices ({} if it cannot)."""
    import jax

    from maxkernel.tpu_tools.cost.xla_cost import cost_analysis_of
    from maxkernel.tpu_tools.hardware import mesh

    try:
        args, scope = mesh.aot_args(target, shapes, mesh_spec)
        with scope:
            return cost_analysis_of(jax.jit(fn).trace(*args).lower().compile())
    except Exception:  # no libtpu, or the program does not compile there: the caller's counts stand
        return {}


def estimate_program(
    jaxpr,
    calls: Sequence[PallasCallInfo],
    chip: str | ChipSpec,
    *,
    reference_flops: float | None,
    xla_flops: float | None,
    io_bytes: float | None,
    xla_tpu_cost: dict[str, float] | None = None,
) -> StaticEstimate:
    """The labeled estimate of `jaxpr` on `chip` (its `calls` already found and vetted by the caller)."""
    if calls:
        from maxkernel.tpu_tools.cost.jaxpr_cost import program_cost  # the estimate costs the whole program

        return estimate_pallas(
            list(calls), chip, total_flops=reference_flops or None, program=program_cost(jaxpr)
        )
    tpu = xla_tpu_cost or {}
    flops = max(reference_flops or 0.0, xla_flops or 0.0, tpu.get("flops", 0.0))
    hbm = max(float(io_bytes or 0), tpu.get("bytes accessed", 0.0))
    est = estimate_pallas([], chip, total_flops=flops, total_bytes=hbm)
    if tpu.get("bytes accessed", 0.0) > float(io_bytes or 0):
        est.assumptions.append(
            "HBM bytes: XLA's cost analysis of the program compiled for the TPU target (its intermediates)"
        )
    return est
