"""One static estimate for a whole traced program: the candidate's and the reference's are costed alike.

The suite's speedup vs the XLA baseline divides two estimates, so both must come from the same code
with the same inputs: the program's pallas_calls (costed with the jaxpr's counted work), or, for plain
JAX, the roofline of its flops and I/O bytes. Flops are the reference's count, or XLA's when larger
for plain JAX; never a kernel's own `pl.CostEstimate` alone (the caller drops those it distrusts).
"""

from __future__ import annotations

from collections.abc import Sequence

from maxkernel.tpu_tools.chips import ChipSpec
from maxkernel.tpu_tools.estimate import StaticEstimate, estimate_pallas
from maxkernel.tpu_tools.pallas_info import PallasCallInfo


def estimate_program(
    jaxpr,
    calls: Sequence[PallasCallInfo],
    chip: str | ChipSpec,
    *,
    reference_flops: float | None,
    xla_flops: float | None,
    io_bytes: float | None,
) -> StaticEstimate:
    """The labeled estimate of `jaxpr` on `chip` (its `calls` already found and vetted by the caller)."""
    flops = max(reference_flops or 0.0, (xla_flops or 0.0) if not calls else 0.0) or None
    if calls:
        from maxkernel.tpu_tools.jaxpr_cost import program_cost  # the estimate costs the whole program

        return estimate_pallas(list(calls), chip, total_flops=flops, program=program_cost(jaxpr))
    return estimate_pallas([], chip, total_flops=flops or 0.0, total_bytes=float(io_bytes or 0))
