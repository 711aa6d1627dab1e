"""Does the kernel do the work? A census of the traced program, inside and outside every pallas_call.

A `pallas_call` next to `jnp.matmul`, a Pallas copy of a `jnp` result, or a kernel in a branch never
taken all validate: the numbers come from plain JAX. So we walk the candidate's jaxpr (into pjit,
closed_call, custom_jvp/vjp, remat, cond, while, scan, shard_map) and count the flops of matmuls,
convolutions, reductions, transcendentals and elementwise arithmetic outside any pallas_call and
inside (the kernel body times its grid). Layout ops (reshape, transpose, convert, slice, pad,
broadcast, select, concatenate) cost nothing here: an epilogue may move data freely.

The verdict (`work_outside_kernel`), documented thresholds:
- a dot_general or convolution outside every kernel, when the reference has one, carrying more than
  `OUTSIDE_MATMUL_SHARE` of the candidate's matmul flops;
- or more than `OUTSIDE_FLOPS_SHARE` of all counted flops outside the kernels (a softmax in jnp plus a
  Pallas copy has ~100% outside; an honest kernel with a `.astype`/bias epilogue has ~0%);
- or no pallas_call that both reads one of the program's inputs and reaches its result (a dead or
  input-free kernel beside plain JAX).
Host callbacks (io_callback, pure_callback) anywhere, kernels included, are `host_callback`: they
carry state from one call to the next (memoized answers, call counters).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

OUTSIDE_MATMUL_SHARE = 0.01
OUTSIDE_FLOPS_SHARE = 0.5
# Counted outside only when they are big enough to matter: a [m]-sized bias add is epilogue.
_TRANSCENDENTAL = {
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "erf", "erfc",
    "erf_inv", "rsqrt", "sqrt", "cbrt", "pow", "atan2", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "lgamma", "digamma", "igamma", "igammac", "bessel_i0e", "bessel_i1e",
}  # fmt: skip
_REDUCTION = {
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor",
    "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "reduce_precision_sum",
    "sort", "top_k", "reduce", "scatter-add", "scatter_add", "segment_sum",
}  # fmt: skip
_ELEMENTWISE = {
    "add", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "sign", "floor", "ceil", "round",
    "integer_pow", "square", "reciprocal", "nextafter", "clamp", "add_any",
}  # fmt: skip
_MATMUL = {"dot_general", "conv_general_dilated", "ragged_dot", "ragged_dot_general"}
_CALLBACKS = {"io_callback", "pure_callback", "callback"}
# XLA's own collectives: in a multi-chip task the communication is the kernel's work.
_COLLECTIVES = {
    "psum", "psum_invariant", "pmax", "pmin", "reduce_scatter", "all_gather", "all_gather_invariant",
    "ppermute", "all_to_all", "ragged_all_to_all", "pbroadcast",
}  # fmt: skip
_DEBUG_CALLBACKS = {"debug_callback", "debug_print"}


class WorkCensus(BaseModel):
    """Flops by primitive outside and inside the pallas_calls of one traced program."""

    outside_flops: dict[str, float] = Field(default_factory=dict, description="primitive -> flops")
    inside_flops: dict[str, float] = Field(default_factory=dict, description="primitive -> flops (x grid)")
    num_pallas_calls: int = 0
    callbacks: list[str] = Field(default_factory=list, description="host callback primitives found")
    debug_callbacks: int = 0
    dead_pallas_calls: list[str] = Field(default_factory=list, description="outputs never reach the result")
    inputless_pallas_calls: list[str] = Field(default_factory=list, description="read none of the inputs")
    data_flow_pallas_calls: list[str] = Field(
        default_factory=list, description="kernels the data-flow pass saw (top level, through pjit)"
    )
    pallas_under_cond: list[str] = Field(
        default_factory=list, description="kernels inside a cond whose other branch does heavy work"
    )
    outside_collectives: list[str] = Field(
        default_factory=list, description="XLA collectives (psum, all_gather, ...) outside every kernel"
    )
    dynamic_grids: list[str] = Field(
        default_factory=list,
        description="grid axes known only at run time, and the bound they were counted at",
    )

    @property
    def outside_matmul_flops(self) -> float:
        return sum(v for k, v in self.outside_flops.items() if k in _MATMUL)

    @property
    def inside_matmul_flops(self) -> float:
        return sum(v for k, v in self.inside_flops.items() if k in _MATMUL)

    @property
    def total_flops(self) -> float:
        return sum(self.outside_flops.values()) + sum(self.inside_flops.values())

    @property
    def has_matmul(self) -> bool:
        return self.outside_matmul_flops + self.inside_matmul_flops > 0


def _size(aval) -> int:
    shape = getattr(aval, "shape", ())
    return int(math.prod(shape)) if shape is not None else 1


def _eqn_flops(eqn) -> tuple[str, float] | None:
    """(bucket primitive, flops) of one non-structural equation, or None for free/layout ops."""
    name = eqn.primitive.name
    outs = [v.aval for v in eqn.outvars]
    ins = [getattr(v, "aval", None) for v in eqn.invars]
    if name == "dot_general":
        (lc, _rc), _ = eqn.params["dimension_numbers"]
        lhs, rhs = ins[0], ins[1]
        contract = math.prod(lhs.shape[d] for d in lc) if lc else 1
        return name, 2.0 * _size(outs[0]) * contract
    if name == "conv_general_dilated":
        rhs = ins[1]
        dn = eqn.params.get("dimension_numbers")
        out_feat_dim = dn.rhs_spec[0] if dn is not None else 0
        per_out = _size(rhs) / max(1, rhs.shape[out_feat_dim])
        return name, 2.0 * _size(outs[0]) * per_out
    if name in ("ragged_dot", "ragged_dot_general"):
        lhs, rhs = ins[0], ins[1]
        return name, 2.0 * _size(lhs) * rhs.shape[-1]
    if name in _TRANSCENDENTAL:
        return name, float(sum(_size(o) for o in outs))
    if name in _REDUCTION:
        return name, float(sum(_size(i) for i in ins if i is not None))
    if name in _ELEMENTWISE:
        return name, float(sum(_size(o) for o in outs))
    return None


# Kernels written with pl.kernel / pl.core_map (64p's cross entropy): jax 0.10.2 traces them as these, not as
# pallas_call; each is one Mosaic kernel whose body runs on the mesh's cores.
KERNEL_MAPS = ("mpmd_map", "core_map")


def _subjaxprs(eqn) -> list[tuple[Any, float]]:
    """(jaxpr, repeat count) for every sub-program of a structural equation."""
    from jax.extend import core as jex_core

    closed_t = jex_core.ClosedJaxpr
    jaxpr_t = jex_core.Jaxpr
    mult = float(eqn.params.get("length", 1)) if eqn.primitive.name == "scan" else 1.0
    if eqn.primitive.name == "shard_map":  # the body is one device's share: every device of the mesh runs it
        mult = float(getattr(eqn.params.get("mesh"), "size", 1) or 1)
    out = []
    for value in eqn.params.values():
        items = value if isinstance(value, tuple | list) else (value,)
        for item in items:
            if isinstance(item, closed_t):
                out.append((item.jaxpr, mult))
            elif isinstance(item, jaxpr_t):
                out.append((item, mult))
    return out


def _grid_size(eqn, notes: list[str]) -> int:
    """Grid steps of a pallas_call: a run-time (dynamic) axis at the most it can run, by the rule the
    estimate uses (pallas_info.bounded_grid), said in `notes`. Counted once, the body of a gmm whose m-tile
    count is data weighed one step against an epilogue over the whole output: compile, at the production
    size, warned that validate would refuse it, and validate, at the small size, accepted it."""
    gm = eqn.params.get("grid_mapping")
    grid = getattr(gm, "grid", ()) or ()
    try:
        return int(math.prod(int(g) for g in grid))
    except TypeError:  # a dynamic grid dimension
        pass
    from maxkernel.tpu_tools.problem.pallas_info import bounded_grid, call_info

    try:
        info = call_info(eqn)
        bounded, why = bounded_grid(info)
    except Exception as e:  # noqa: BLE001 - a kernel we cannot read: its body counted once, said so
        notes.append(f"{_kernel_name(eqn, 0)}: a grid axis known only at run time, counted once ({e})"[:300])
        return 1
    notes += [f"{info.kernel_name}: {w}" for w in why]
    return int(math.prod(bounded))


def _kernel_name(eqn, index: int) -> str:
    info = eqn.params.get("name_and_src_info") or eqn.params.get("name")
    return f"pallas_call #{index} ({getattr(info, 'name', info) or 'kernel'})"


class _Walker:
    def __init__(self) -> None:
        self.census = WorkCensus()

    def add(self, where: dict[str, float], name: str, flops: float) -> None:
        where[name] = where.get(name, 0.0) + flops

    def walk(self, jaxpr, mult: float, inside: bool) -> None:
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in _CALLBACKS:
                self.census.callbacks.append(name)
                continue
            if name in _DEBUG_CALLBACKS:
                self.census.debug_callbacks += 1
                continue
            if name in _COLLECTIVES and not inside:
                self.census.outside_collectives.append(name)
            if name == "pallas_call":
                self.census.num_pallas_calls += 1
                body = eqn.params["jaxpr"]
                steps = _grid_size(eqn, self.census.dynamic_grids)
                self.walk(getattr(body, "jaxpr", body), mult * steps, True)
                continue
            if name in KERNEL_MAPS:  # pl.kernel / pl.core_map: a Mosaic kernel over the cores, no grid
                self.census.num_pallas_calls += 1
                for sub, times in _subjaxprs(eqn):
                    self.walk(sub, mult * times, True)
                continue
            if name in _REDUCTION:  # counted by its operands: a scatter-add's update_jaxpr is one scalar add
                bucket, flops = _eqn_flops(eqn)
                self.add(
                    self.census.inside_flops if inside else self.census.outside_flops, bucket, flops * mult
                )
                continue
            subs = _subjaxprs(eqn)
            if name == "cond" and not inside:
                self._walk_cond(eqn, mult)
                continue
            if subs:
                for sub, m in subs:
                    self.walk(sub, mult * m, inside)
                continue
            counted = _eqn_flops(eqn)
            if counted is not None:
                bucket, flops = counted
                self.add(
                    self.census.inside_flops if inside else self.census.outside_flops, bucket, flops * mult
                )

    def _walk_cond(self, eqn, mult: float) -> None:
        """Branches: count the heaviest; flag kernels in one branch beside heavy plain JAX in another."""
        results = []
        for sub, m in _subjaxprs(eqn):
            w = _Walker()
            w.walk(sub, mult * m, False)
            results.append(w.census)
        if not results:
            return
        kernels = [c for c in results if c.num_pallas_calls]
        heavy_plain = [
            c
            for c in results
            if not c.num_pallas_calls and c.outside_matmul_flops + sum(c.outside_flops.values()) > 0
        ]
        if kernels and heavy_plain:
            self.census.pallas_under_cond.append(
                f"cond with {len(results)} branches: a pallas_call in {len(kernels)}, plain-JAX work in "
                f"{len(heavy_plain)}"
            )
        heaviest_outside = max(results, key=lambda c: sum(c.outside_flops.values()))
        for k, v in heaviest_outside.outside_flops.items():
            self.add(self.census.outside_flops, k, v)
        heaviest_inside = max(results, key=lambda c: sum(c.inside_flops.values()))
        for k, v in heaviest_inside.inside_flops.items():
            self.add(self.census.inside_flops, k, v)
        for c in results:
            self.census.num_pallas_calls += c.num_pallas_calls
            self.census.callbacks += c.callbacks
            self.census.debug_callbacks += c.debug_callbacks
            self.census.pallas_under_cond += c.pallas_under_cond
            self.census.dynamic_grids += c.dynamic_grids


def _data_flow(jaxpr, census: WorkCensus) -> None:
    """Top-level pallas_calls (through pjit nesting): dead outputs and input-free operands."""
    from jax.extend import core as jex_core

    literal_t = jex_core.Literal
    counter = [0]

    def visit(jx, live_inputs: list[bool]) -> list[bool]:
        """Returns, per outvar of jx, whether it depends on an input; records kernels' liveness."""
        depends: dict[Any, bool] = {v: live for v, live in zip(jx.invars, live_inputs, strict=False)}
        for v in jx.constvars:
            depends[v] = False
        kernels: list[tuple[str, list]] = []
        for eqn in jx.eqns:
            ins = [False if isinstance(v, literal_t) else depends.get(v, False) for v in eqn.invars]
            if eqn.primitive.name == "pallas_call" or eqn.primitive.name in KERNEL_MAPS:
                counter[0] += 1
                label = _kernel_name(eqn, counter[0])
                census.data_flow_pallas_calls.append(label)
                if not any(ins):
                    census.inputless_pallas_calls.append(label)
                kernels.append((label, list(eqn.outvars)))
                outs = [any(ins)] * len(eqn.outvars)
            elif eqn.primitive.name in ("pjit", "closed_call", "core_call", "remat", "checkpoint") and (
                subs := _subjaxprs(eqn)
            ):
                outs = visit(subs[0][0], ins)
            else:
                outs = [any(ins)] * len(eqn.outvars)
            for v, d in zip(eqn.outvars, outs, strict=False):
                depends[v] = d
        # liveness: which vars reach jx.outvars (backwards)
        live = {v for v in jx.outvars if not isinstance(v, literal_t)}
        for eqn in reversed(jx.eqns):
            if any(v in live for v in eqn.outvars):
                live.update(v for v in eqn.invars if not isinstance(v, literal_t))
        for label, outvars in kernels:
            if not any(v in live for v in outvars):
                census.dead_pallas_calls.append(label)
        return [False if isinstance(v, literal_t) else depends.get(v, False) for v in jx.outvars]

    visit(jaxpr, [True] * len(jaxpr.invars))


def census_of(closed_jaxpr) -> WorkCensus:
    """The work census of a traced program (`jax.make_jaxpr(f)(*specs)`)."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    walker = _Walker()
    walker.walk(jaxpr, 1.0, False)
    _data_flow(jaxpr, walker.census)
    return walker.census


def _fmt_flops(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}flop"
    return f"{x:.0f} flop"


def work_verdict(candidate: WorkCensus, reference: WorkCensus | None) -> str | None:
    """The `work_outside_kernel` summary, or None when the kernels carry the work."""
    if not candidate.num_pallas_calls:
        return None  # no kernel at all: `no_kernel` (or allow_plain_jax) decides
    total = candidate.total_flops
    outside = sum(candidate.outside_flops.values())
    top = sorted(candidate.outside_flops.items(), key=lambda kv: -kv[1])[:4]
    named = ", ".join(f"{k} {_fmt_flops(v)}" for k, v in top)
    # No kernel that both reads an input and reaches the result (kernels inside cond/scan bodies are not in
    # the data-flow pass, so they keep the benefit of the doubt; the flop shares below still judge them).
    seen = candidate.data_flow_pallas_calls
    useless = set(candidate.dead_pallas_calls) | set(candidate.inputless_pallas_calls)
    if seen and len(seen) == candidate.num_pallas_calls and useless >= set(seen):
        if candidate.dead_pallas_calls:
            return (
                f"{', '.join(candidate.dead_pallas_calls)}: its output never reaches the result; the answer "
                f"comes from plain JAX ({named or 'no counted ops'})"
            )
        return f"{', '.join(candidate.inputless_pallas_calls)} reads none of the inputs"
    out_mm, all_mm = (
        candidate.outside_matmul_flops,
        candidate.outside_matmul_flops + candidate.inside_matmul_flops,
    )
    ref_has_mm = reference is None or reference.has_matmul
    if ref_has_mm and out_mm > 0 and out_mm > OUTSIDE_MATMUL_SHARE * all_mm:
        ops = ", ".join(f"{k} {_fmt_flops(v)}" for k, v in top if k in _MATMUL)
        return (
            f"matmul outside every pallas_call: {ops} = {out_mm / all_mm:.0%} of the matmul flops "
            f"(threshold {OUTSIDE_MATMUL_SHARE:.0%})"
        )
    if total > 0 and outside > OUTSIDE_FLOPS_SHARE * total:
        cond = f"; {candidate.pallas_under_cond[0]}" if candidate.pallas_under_cond else ""
        return (
            f"{outside / total:.0%} of the counted flops run outside the pallas_calls ({named}); threshold "
            f"{OUTSIDE_FLOPS_SHARE:.0%}{cond}"
        )
    if candidate.pallas_under_cond and outside > 0:
        return f"{candidate.pallas_under_cond[0]}: the kernel may never run ({named})"
    return None


def collective_verdict(candidate: WorkCensus) -> str | None:
    """For a kernel over a mesh: communication done by XLA's collectives, not by the kernels' remote DMAs."""
    if not candidate.outside_collectives:
        return None
    names = ", ".join(sorted(set(candidate.outside_collectives)))
    return (
        f"the communication runs as XLA collectives outside the kernels ({names}): a multi-chip kernel "
        "moves its data with remote DMAs (pltpu.make_async_remote_copy) inside its pallas_calls"
    )


def callback_verdict(candidate: WorkCensus) -> str | None:
    if not candidate.callbacks:
        return None
    names = sorted(set(candidate.callbacks))
    return (
        f"host callback in the candidate's program ({', '.join(names)} x{len(candidate.callbacks)}): "
        "a callback can carry state from one call to the next (memoized answers, call counters)"
    )
