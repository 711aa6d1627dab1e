"""A model step as one flat list of equations that can be evaluated again, whole or with parts replaced.

`flatten` traces `workload` (nested user calls inlined, each equation keeping its scope and source: see
problem/program.py's flattener) and keeps the jax equations beside their text form, which the emitter
re-writes as source. `evaluate` re-binds the equations in order: under a named scope per region (so the
compiled HLO's op_name metadata says which region every fusion came from), or with some equation ranges
replaced by a function (a spliced-in extracted region or a kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from maxkernel.tpu_tools.problem.program import ProgramDescription, _Flattener, _spec


@dataclass
class FlatProgram:
    """The flattened step: text equations (`program`, the emitter's input) and their jax twins (`raw`)."""

    program: ProgramDescription
    raw: list[tuple[Any, list[tuple[str, Any]], tuple[int, ...]]]
    const_values: dict[str, Any] = field(default_factory=dict)
    in_tree: Any = None
    out_tree: Any = None

    @property
    def equations(self):
        return self.program.equations


@dataclass(frozen=True)
class Replacement:
    """Equations [start, stop) computed by `fn(*inputs)` instead, its results named `outputs`."""

    start: int
    stop: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn: Callable[..., Any]


def flatten(
    workload: Callable[..., Any], args: Sequence[Any], *, name: str = "model", size: str = ""
) -> FlatProgram:
    """Trace `workload(*args)` (arrays or ShapeDtypeStructs) into a FlatProgram."""
    import jax

    leaves, in_tree = jax.tree_util.tree_flatten(tuple(args))
    closed, out_shape = jax.make_jaxpr(workload, return_shape=True)(*args)
    out_tree = jax.tree_util.tree_structure(out_shape)
    flat = _Flattener(keep=True, unroll_scans=True)
    names = [f"x{i}" for i in range(len(leaves))]
    outs = flat.walk(closed.jaxpr, list(closed.consts), names)
    program = ProgramDescription(
        reference=name,
        size=size,
        inputs=[_spec(s) for s in leaves],
        input_names=names,
        outputs=outs,
        out_specs=[_spec(v.aval) for v in closed.jaxpr.outvars],
        equations=flat.eqns,
        census=dict(flat.census),
        unrenderable=sorted(flat.unrenderable),
    )
    return FlatProgram(program, flat.raw, flat.const_values, in_tree, out_tree)


def _bind(eqn: Any, vals: list[Any]) -> list[Any]:
    """Bind one equation again as jax's own eval_jaxpr does (its source line and context kept)."""
    from jax._src import source_info_util

    params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(params, tuple):  # older jax: (subfuns, params)
        subfuns, params = params
        vals = [*subfuns, *vals]
    stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
    with source_info_util.user_context(eqn.source_info.traceback, name_stack=stack), eqn.ctx.manager:
        out = eqn.primitive.bind(*vals, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def evaluate(
    flat: FlatProgram,
    leaves: Sequence[Any],
    *,
    scopes: Sequence[str | None] | None = None,
    replace: Sequence[Replacement] = (),
) -> list[Any]:
    """The step's outputs for input `leaves`, equation by equation (trace it under jit to compile it).

    `scopes[i]` names the scope equation i is bound under (HLO op_name metadata); `replace` computes
    disjoint equation ranges with other functions.
    """
    import contextlib

    import jax

    env: dict[str, Any] = dict(zip(flat.program.input_names, leaves, strict=True))
    starts: Mapping[int, Replacement] = {r.start: r for r in replace}
    i, n = 0, len(flat.raw)
    while i < n:
        r = starts.get(i)
        scope = scopes[i] if scopes is not None else None
        ctx = jax.named_scope(scope) if scope else contextlib.nullcontext()
        if r is not None:
            with ctx:
                outs = r.fn(*(env[a] for a in r.inputs))
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if len(outs) != len(r.outputs):
                raise ValueError(
                    f"the replacement returned {len(outs)} outputs, the region has {len(r.outputs)}"
                )
            env.update(zip(r.outputs, outs, strict=True))
            i = r.stop
            continue
        eqn, raw_ins, _path = flat.raw[i]
        vals = [env[v] if kind == "var" else v for kind, v in raw_ins]
        with ctx:
            outs = _bind(eqn, vals)
        env.update(zip(flat.equations[i].outputs, outs, strict=True))
        i += 1
    return [_value(flat, env, o) for o in flat.program.outputs]


def _value(flat: FlatProgram, env: Mapping[str, Any], name: str) -> Any:
    if name in env:
        return env[name]
    if name in flat.const_values:
        return flat.const_values[name]
    raise KeyError(f"output {name} is neither computed nor a constant")


def range_fn(flat: FlatProgram, start: int, stop: int, inputs: Sequence[str], outputs: Sequence[str]):
    """A function computing equations [start, stop) from `inputs` (values named as in the step) to `outputs`."""

    def run(*vals: Any) -> tuple[Any, ...]:
        env: dict[str, Any] = dict(zip(inputs, vals, strict=True))
        for i in range(start, stop):
            eqn, raw_ins, _ = flat.raw[i]
            outs = _bind(eqn, [env[v] if kind == "var" else v for kind, v in raw_ins])
            env.update(zip(flat.equations[i].outputs, outs, strict=True))
        return tuple(env[o] for o in outputs)

    return run
