"""Count the work of a traced program: inside each pallas_call's body, and outside every kernel.

The estimate must cost the whole program (a kernel that moves its matmul into `jnp` pays for it),
and a declared `pl.CostEstimate` is checked against what the kernel body really does. This is a
static count over the jaxpr: matmul/conv flops, transcendentals, and the bytes of every value the
XLA ops outside the kernels read or write (each value once: an upper bound on what XLA's fusions
move, a lower bound never).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.cost.branches import KernelBranches, body_loop_trips, body_work, kernel_branches
from maxkernel.tpu_tools.cost.data_work import BodyCounts, CallData
from maxkernel.tpu_tools.cost.jaxpr_ops import (
    TRANSCENDENTAL,
    _conv_flops,
    _dot_flops,
    _nbytes,
    _size,
    _subjaxprs,
)
from maxkernel.tpu_tools.problem.dot_precision import dot_passes

__all__ = ["OutsideOp", "ProgramCost", "program_cost"]

# Primitives that move no data (or only metadata) when XLA runs them.
FREE = {"reshape", "squeeze", "expand_dims", "broadcast_in_dim", "convert_element_type", "bitcast_convert_type",
        "iota", "copy_p", "pjit", "closed_call", "custom_jvp_call", "custom_vjp_call", "stop_gradient"}  # fmt: skip


class OutsideOp(BaseModel):
    primitive: str
    flops: float
    count: int


class ProgramCost(BaseModel):
    """Work found in a jaxpr, split into pallas_call bodies and the XLA ops around them."""

    kernel_flops_per_step: list[float] = Field(
        description="matmul/conv flops of each pallas_call body, one step"
    )
    kernel_transcendentals_per_step: list[float]
    kernel_mxu_pass_flops: list[dict[str, float]] = Field(
        default_factory=list,
        description="per pallas_call, one step's matmul flops x the MXU passes Mosaic takes for them "
        "(dot_precision.py), by the MXU rate's dtype",
    )
    kernel_branches: list[KernelBranches | None] = Field(
        default_factory=list, description="per pallas_call, its pl.when branches and how often each runs"
    )
    kernel_loop_trips: list[list[float | None]] = Field(
        default_factory=list,
        description="per pallas_call, the trip count of each loop in its body (None: a value not known; "
        "a while loop's mean trips per entry where the inputs' values gave it)",
    )
    outside_flops: float = Field(description="matmul/conv flops outside every pallas_call")
    outside_vpu_ops: float = Field(description="elementwise/reduction element-ops outside the kernels")
    outside_transcendentals: float
    outside_bytes: float = Field(description="bytes of the values the outside ops read or write, each once")
    outside_matmul_dtype: str | None = None
    outside_mxu_pass_flops: dict[str, float] = Field(
        default_factory=dict,
        description="outside matmul flops x the MXU passes XLA takes for them at their precision, by rate dtype",
    )
    outside_ops: list[OutsideOp] = Field(
        default_factory=list, description="primitive -> flops, biggest first"
    )
    notes: list[str] = Field(default_factory=list)


def _body_work(jaxpr, counts: BodyCounts | None = None) -> tuple[float, float, dict[str, float]]:
    """(matmul flops, transcendentals, MXU pass-flops) of a kernel body's average step; cond branches count
    their costliest branch, a while loop one trip, unless `counts` (the inputs' values) say what ran."""
    w = body_work(jaxpr.eqns, counts)
    return w.flops, w.transcendentals, w.mxu_pass_flops


class _Outside:
    def __init__(self, data: list[CallData] | None = None) -> None:
        self.data = data
        self.flops = self.vpu = self.trans = 0.0
        self.seen: dict[int, int] = {}
        self.ops: dict[str, list[float]] = {}
        self.kernel_flops: list[float] = []
        self.kernel_trans: list[float] = []
        self.kernel_mxu: list[dict[str, float]] = []
        self.mxu: dict[str, float] = {}
        self.kernel_branches: list[KernelBranches | None] = []
        self.kernel_loops: list[list[int | None]] = []
        self.mm_dtype: str | None = None
        self.notes: list[str] = []

    def touch(self, v: Any) -> None:
        if hasattr(v, "aval") and not hasattr(v, "val"):  # a Var, not a Literal
            self.seen.setdefault(id(v), _nbytes(v.aval))

    def walk(self, jaxpr, mult: float = 1.0) -> None:
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "pallas_call":
                i = len(self.kernel_flops)
                counts = self.data[i].counts if self.data and i < len(self.data) else None
                f, t, mxu = _body_work(eqn.params["jaxpr"], counts)
                self.kernel_flops.append(f)
                self.kernel_trans.append(t)
                self.kernel_mxu.append(mxu)
                self.kernel_branches.append(kernel_branches(eqn, counts=counts))
                self.kernel_loops.append(body_loop_trips(eqn.params["jaxpr"].eqns, counts))
                continue
            subs = _subjaxprs(eqn)
            if subs:
                m = mult * (float(eqn.params.get("length", 1)) if name == "scan" else 1.0)
                if name == "while":
                    self.notes.append("a while loop outside the kernels is counted once (trip count unknown)")
                for s in subs:
                    self.walk(s, m)
                continue
            flops = 0.0
            if name in ("dot_general", "conv_general_dilated"):
                flops = _dot_flops(eqn) if name == "dot_general" else _conv_flops(eqn)
                self.mm_dtype = self.mm_dtype or str(eqn.invars[0].aval.dtype)
                rate, passes = dot_passes(eqn, mosaic=False)  # XLA's passes at the dot's precision
                self.mxu[rate] = self.mxu.get(rate, 0.0) + mult * flops * passes
            elif name in TRANSCENDENTAL:
                self.trans += mult * _size(eqn.outvars[0].aval)
            if name in FREE:
                continue
            if not flops:
                self.vpu += mult * max((_size(v.aval) for v in eqn.invars if hasattr(v, "aval")), default=0)
            self.flops += mult * flops
            rec = self.ops.setdefault(name, [0.0, 0])
            rec[0] += mult * flops
            rec[1] += 1
            for v in (*eqn.invars, *eqn.outvars):
                self.touch(v)


def program_cost(closed_jaxpr: Any, data: list[CallData] | None = None) -> ProgramCost:
    """Count the work of `jax.jit(f).trace(...).jaxpr` (or a ClosedJaxpr / Jaxpr). `data`: per
    pallas_call, what its body did on the inputs' values (data_work.call_data), where known."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    w = _Outside(data)
    w.walk(jaxpr)
    ops = sorted(
        (OutsideOp(primitive=k, flops=v[0], count=int(v[1])) for k, v in w.ops.items()),
        key=lambda o: -o.flops,
    )
    return ProgramCost(
        kernel_flops_per_step=w.kernel_flops,
        kernel_transcendentals_per_step=w.kernel_trans,
        kernel_mxu_pass_flops=w.kernel_mxu,
        kernel_branches=w.kernel_branches,
        kernel_loop_trips=w.kernel_loops,
        outside_flops=w.flops,
        outside_vpu_ops=w.vpu,
        outside_transcendentals=w.trans,
        outside_bytes=float(sum(w.seen.values())),
        outside_matmul_dtype=w.mm_dtype,
        outside_mxu_pass_flops=w.mxu,
        outside_ops=ops,
        notes=sorted(set(w.notes)),
    )
