"""A Pallas reference off its chip: traced as the target chip, and its traced program run in interpret mode.

A production kernel given as the reference (a level-2 baseline, a user's own kernel) asks the chip for its
blocks while it traces (`pltpu.get_tpu_info()`, emit_pipeline) and cannot run on the host's XLA. The judge
treats it as it treats a candidate: traced for the target (hardware/chip_trace.py: libtpu's compile-only
device of the target's topology, so chip queries answer for that chip), and that traced program is what
runs, in TPU interpret mode on CPU. On the chip itself it runs as written.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

DEFAULT_TARGET = "tpu-v6e"  # the tool's default target (cli/args.py), for a reference traced without one
_TARGET: contextvars.ContextVar[str] = contextvars.ContextVar(
    "maxkernel_reference_target", default=DEFAULT_TARGET
)
# Pallas fixes a kernel's interpret mode when it is traced: a trace made for compiling is not one to run
_INTERPRETED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "maxkernel_reference_interpreted", default=False
)


def uses_pallas(source: str) -> bool:
    """Whether a reference's source calls Pallas TPU kernels (then it is traced and run as above)."""
    return "pallas" in source and any(
        w in source for w in ("pallas_call", "pltpu", "emit_pipeline", "tpu_sc")
    )


@contextlib.contextmanager
def reference_target(target: str | None) -> Iterator[None]:
    """Within: a Pallas reference is traced for `target` (a TPU target; other targets keep the default)."""
    if not target or not target.startswith("tpu"):
        yield
        return
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)


@contextlib.contextmanager
def interpreted(pallas: bool) -> Iterator[None]:
    """Within: a Pallas reference's kernels run in TPU interpret mode, off the chip (no race detection:
    the reference's output is the ground truth, its races are not what is judged)."""
    import jax

    if not pallas or jax.default_backend() == "tpu":
        yield
        return
    from maxkernel.tpu_tools.hardware import execution

    token = _INTERPRETED.set(True)
    try:
        with execution.tpu_interpret_mode():
            yield
    finally:
        _INTERPRETED.reset(token)


def as_chip_program(workload: Callable[..., Any]) -> Callable[..., Any]:
    """`workload` as the target chip traces it: one trace per target and argument shapes, then that program."""
    cache: dict[tuple, tuple] = {}

    def run(*args):
        import jax

        if jax.default_backend() == "tpu":
            return workload(*args)
        from maxkernel.tpu_tools.hardware.chip_trace import trace_as_target
        from maxkernel.tpu_tools.hardware.targets import parse_target
        from maxkernel.tpu_tools.problem.config_reference import signature

        target = parse_target(_TARGET.get())
        leaves, tree = jax.tree_util.tree_flatten(args)
        key = (target.name, _INTERPRETED.get(), tree, signature(leaves))
        if key not in cache:
            shapes = [jax.ShapeDtypeStruct(tuple(x.shape), x.dtype) for x in leaves]

            def flat(*xs):
                return workload(*jax.tree_util.tree_unflatten(tree, xs))

            with trace_as_target(target):
                closed, out_shape = jax.make_jaxpr(flat, return_shape=True)(*shapes)
            cache[key] = (closed, jax.tree_util.tree_structure(out_shape))
        closed, out_tree = cache[key]
        out = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *leaves)
        return jax.tree_util.tree_unflatten(out_tree, out)

    run.__wrapped__ = workload  # type: ignore[attr-defined]
    return run
