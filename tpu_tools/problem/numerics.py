"""A reference's program as a target computes it, and its upcast oracle: the two runs the error rule needs.

The host's XLA is not the chip's. On a TPU a float32 dot or convolution at DEFAULT precision runs as one
bfloat16 MXU pass with f32 accumulation (`BF16_BF16_F32`), HIGH as three (`BF16_BF16_F32_X3`), HIGHEST at
float32; the CPU computes all three in float32. So the judge re-evaluates the reference's own jaxpr, equation
by equation, in one of two modes:

- `oracle`: every floating value widened (to float64 where the program holds float32, else float32), every
  dot and convolution at HIGHEST, explicit roundings (`reduce_precision`, casts to narrower floats) kept
  wide: the answer the reference's equations mean, as exactly as the host can give it.
- `tpu`: the program as written, each dot and convolution at the algorithm a TPU runs for its declared
  precision (an explicit `precision=`, a dot algorithm, or `jax_default_matmul_precision`, which jax bakes
  into the jaxpr when it traces).

Control flow (jit, scan, while, cond, custom_jvp/vjp, remat) is re-entered; a reduce_window whose reducer is one
add/max/min/mul is widened like any reduction; any other equation that holds a program of its own (a
pallas_call, shard_map) runs as written, its inputs cast back to their traced dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

Mode = Literal["oracle", "tpu"]

# Equations whose sub-program is evaluated in place (the name of the parameter that holds it).
_CALLS = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}
# Equations whose meaning is tied to their traced dtypes (a bit view): run as written.
_AS_WRITTEN = {"bitcast_convert_type", "random_bits", "random_wrap", "random_unwrap", "random_seed"}


def _floating(dtype) -> bool:
    import jax.numpy as jnp

    try:
        return bool(jnp.issubdtype(dtype, jnp.floating))
    except TypeError:
        return False


def tpu_passes(precision, lhs_dtype, rhs_dtype) -> int | None:
    """MXU passes a TPU runs for a dot/conv of these operands (the estimate's table, dot_precision.py: 1 at
    DEFAULT, 3 at HIGH, 6 at HIGHEST, 9 for BF16_BF16_F32_X9; 6 or more computes as f32 here): None where it
    computes them natively (both operands narrower than float32) or the algorithm is one the table lacks."""
    from maxkernel.tpu_tools.problem.dot_precision import declared_passes

    wide = [np.dtype(d).itemsize >= 4 for d in (lhs_dtype, rhs_dtype) if _floating(d)]
    if not any(wide):
        return None
    return declared_passes(precision)


def precision_of(closed) -> list[str]:
    """What a TPU does differently from the host in this program: one line per kind of dot/conv
    (e.g. '3 dot_general f32 at DEFAULT: 1 bf16 pass on the target'); empty when nothing differs."""
    seen: dict[str, int] = {}

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in ("dot_general", "conv_general_dilated"):
                a, b = (v.aval.dtype for v in eqn.invars[:2])
                passes = tpu_passes(eqn.params.get("precision"), a, b)
                if passes is not None and passes < 6:
                    prec = eqn.params.get("precision")
                    said = "DEFAULT" if prec is None else _name(prec)
                    key = (
                        f"{eqn.primitive.name} {np.dtype(a).name}x{np.dtype(b).name} at {said}: "
                        f"{passes} bf16 pass{'es' if passes > 1 else ''} with f32 accumulation"
                    )
                    seen[key] = seen.get(key, 0) + 1
            if eqn.primitive.name in _CALLS or eqn.primitive.name in ("scan", "while", "cond"):
                for sub in _subjaxprs(
                    eqn
                ):  # what the rewrite re-enters (a pallas_call's body runs as written)
                    walk(sub)

    walk(closed.jaxpr)
    return [f"{n} x {k}" for k, n in seen.items()]


def _name(precision) -> str:
    if isinstance(precision, tuple | list):
        names = sorted({getattr(p, "name", str(p)) for p in precision if p is not None})
        return "/".join(names) or "DEFAULT"
    return getattr(precision, "name", str(precision))


def _subjaxprs(eqn) -> list:
    from jax.extend import core

    out = []
    for v in eqn.params.values():
        for item in v if isinstance(v, tuple | list) else (v,):
            if isinstance(item, core.ClosedJaxpr):
                out.append(item.jaxpr)
            elif isinstance(item, core.Jaxpr):
                out.append(item)
    return out


def _monoid(params):
    """The lax op of a generic reduce_window's reducer when it is one add/max/min/mul of its two scalars, else
    None (variadic windows, a reducer with more to it, a literal operand)."""
    from jax import lax

    sub = params.get("jaxpr")
    sub = getattr(sub, "jaxpr", sub)
    eqns = getattr(sub, "eqns", None)
    if not eqns or len(eqns) != 1 or len(sub.invars) != 2 or len(sub.outvars) != 1 or params.get("consts"):
        return None
    (e,) = eqns
    ops = {"add": lax.add, "max": lax.max, "min": lax.min, "mul": lax.mul}
    if (
        e.primitive.name not in ops
        or list(e.invars) != list(sub.invars)
        or e.outvars[0] is not sub.outvars[0]
    ):
        return None
    return ops[e.primitive.name]


def oracle_dtype(closed) -> np.dtype:
    """float64 when the program holds float32 (or wider) values and the host can enable x64, else float32."""
    wide = False

    def walk(jaxpr):
        nonlocal wide
        for v in list(jaxpr.invars) + list(jaxpr.constvars) + [o for e in jaxpr.eqns for o in e.outvars]:
            dt = getattr(getattr(v, "aval", None), "dtype", None)
            if dt is not None and _floating(dt) and np.dtype(dt).itemsize >= 4:
                wide = True
        for eqn in jaxpr.eqns:
            for sub in _subjaxprs(eqn):
                walk(sub)

    walk(closed.jaxpr)
    return np.dtype(np.float64 if wide else np.float32)


class _Rewrite:
    """One evaluation mode: how values, dots and the other equations are bound."""

    def __init__(self, mode: Mode, wide: np.dtype | None = None) -> None:
        self.mode = mode
        self.wide = wide

    def value(self, x):
        import jax.numpy as jnp

        if self.mode == "oracle" and hasattr(x, "dtype") and _floating(x.dtype):
            return jnp.asarray(x, self.wide)
        return x

    def back(self, x, aval):
        """A value cast to the dtype the program traced it with (for equations run as written)."""
        import jax.numpy as jnp

        dt = getattr(aval, "dtype", None)
        if dt is not None and hasattr(x, "dtype") and x.dtype != dt:
            return jnp.asarray(x).astype(dt)
        return x

    def as_written(self, eqn, invals):
        outs = eqn.primitive.bind(
            *[self.back(x, v.aval) for x, v in zip(invals, eqn.invars, strict=True)], **eqn.params
        )
        outs = outs if eqn.primitive.multiple_results else [outs]
        return [self.value(o) for o in outs]

    def eqn(self, eqn, invals) -> list:
        from jax import lax
        from jax.extend import core

        name = eqn.primitive.name
        params = dict(eqn.params)
        if name in ("dot_general", "conv_general_dilated"):
            return [self.contraction(eqn, invals)]
        if name in _CALLS and isinstance(params.get(_CALLS[name]), core.ClosedJaxpr | core.Jaxpr):
            sub = params[_CALLS[name]]
            if isinstance(sub, core.ClosedJaxpr):
                return evaluate(sub.jaxpr, sub.consts, invals, self)
            return evaluate(sub, [], invals, self)
        if name == "scan":
            return self.scan(params, invals)
        if name == "while":
            return self.while_loop(params, invals)
        if name == "cond":
            branches = params["branches"]
            fns = [(lambda *ops, b=b: tuple(evaluate(b.jaxpr, b.consts, list(ops), self))) for b in branches]
            return list(lax.switch(invals[0], fns, *invals[1:]))
        if self.mode == "oracle" and name == "reduce_window" and (op := _monoid(params)) is not None:
            return [self.window(params, op, invals)]
        if _subjaxprs(eqn) or name in _AS_WRITTEN:
            return self.as_written(eqn, invals)
        if self.mode == "oracle":
            if name == "reduce_precision":
                return [invals[0]]
            for key in ("dtype", "new_dtype", "preferred_element_type"):
                if key in params and params[key] is not None and _floating(params[key]):
                    params[key] = self.wide
        try:
            outs = eqn.primitive.bind(*invals, **params)
        except Exception:  # noqa: BLE001 - an op that insists on its traced dtypes runs as written
            return self.as_written(eqn, invals)
        return list(outs) if eqn.primitive.multiple_results else [outs]

    def window(self, params, op, invals):
        """A reduce_window over one operand whose reducer is one add/max/min/mul, at the widened dtype: run as
        written, its sums would round as the reference's do (an average pool summed in bf16)."""
        from jax import lax

        x, init = invals
        return lax.reduce_window(
            x,
            lax.convert_element_type(init, x.dtype),
            op,
            params["window_dimensions"],
            params["window_strides"],
            params["padding"],
            params["base_dilation"],
            params["window_dilation"],
        )

    def contraction(self, eqn, invals):
        import jax.numpy as jnp
        from jax import lax

        params = dict(eqn.params)
        lhs, rhs = invals[0], invals[1]
        out_dtype = eqn.outvars[0].aval.dtype
        bind = eqn.primitive.bind
        if self.mode == "oracle":
            params["precision"] = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
            if params.get("preferred_element_type") is not None and _floating(
                params["preferred_element_type"]
            ):
                params["preferred_element_type"] = self.wide
            lhs, rhs = self.value(lhs), self.value(rhs)
            return bind(lhs, rhs, *invals[2:], **params)
        passes = tpu_passes(params.get("precision"), lhs.dtype, rhs.dtype)
        if passes is None or passes >= 6:
            return bind(*invals, **params)
        params["precision"] = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
        params["preferred_element_type"] = jnp.float32
        f32 = jnp.float32
        bf16 = jnp.bfloat16

        def split(x):  # each half bf16-rounded, held in f32: a bf16 x bf16 product is exact in f32, and the
            # host's dot runtime may not take bf16 operands with an f32 result (XLA CPU's DotThunk)
            hi = x.astype(bf16).astype(f32)
            return hi, (x.astype(f32) - hi).astype(bf16).astype(f32)

        lh, ll = split(lhs)
        rh, rl = split(rhs)
        if passes == 1:
            out = bind(lh, rh, **params)
        else:  # bf16_3x: the small cross terms first, then the leading product
            out = bind(lh, rl, **params) + bind(ll, rh, **params)
            out = out + bind(lh, rh, **params)
        return out.astype(out_dtype)

    def scan(self, params, invals):
        from jax import lax

        body = params["jaxpr"]
        nc, ncarry = params["num_consts"], params["num_carry"]
        consts, carry, xs = invals[:nc], invals[nc : nc + ncarry], invals[nc + ncarry :]

        def step(c, x):
            outs = evaluate(body.jaxpr, body.consts, list(consts) + list(c) + list(x), self)
            return tuple(outs[:ncarry]), tuple(outs[ncarry:])

        c, ys = lax.scan(
            step,
            tuple(carry),
            tuple(xs),
            length=params["length"],
            reverse=params["reverse"],
            unroll=params["unroll"],
        )
        return list(c) + list(ys)

    def while_loop(self, params, invals):
        from jax import lax

        cj, bj = params["cond_jaxpr"], params["body_jaxpr"]
        cn, bn = params["cond_nconsts"], params["body_nconsts"]
        cconsts, bconsts, init = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]

        def cond(c):
            return evaluate(cj.jaxpr, cj.consts, list(cconsts) + list(c), self)[0]

        def body(c):
            return tuple(evaluate(bj.jaxpr, bj.consts, list(bconsts) + list(c), self))

        return list(lax.while_loop(cond, body, tuple(init)))


def evaluate(jaxpr, consts, args, rw: _Rewrite) -> list:
    """Evaluate `jaxpr` equation by equation under the rewrite `rw`."""
    from jax.extend import core

    env: dict = {}

    def read(v):
        return rw.value(np.asarray(v.val)) if isinstance(v, core.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = rw.value(c)
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        outs = rw.eqn(eqn, [read(v) for v in eqn.invars])
        for v, o in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, core.DropVar):
                env[v] = o
    return [read(v) for v in jaxpr.outvars]


def as_computed(fn: Callable, args: tuple, mode: Mode) -> tuple[Callable, str]:
    """(a jitted function of `args`' leaves that computes `fn` in `mode`, a line saying how).

    The returned function takes the flat leaves of `args` (as the reference's create_inputs gives them)
    and returns the flat output leaves; in oracle mode it widens its float inputs itself and runs under
    x64 when float64 is the oracle's dtype.
    """
    import jax

    leaves, tree = jax.tree_util.tree_flatten(args)

    def flat(*xs):
        return fn(*jax.tree_util.tree_unflatten(tree, list(xs)))

    closed = jax.make_jaxpr(flat)(*leaves)
    if mode == "tpu":
        rw = _Rewrite("tpu")
        run = jax.jit(lambda *xs: evaluate(closed.jaxpr, closed.consts, list(xs), rw))
        lines = precision_of(closed)
        how = (
            "as a TPU computes it: " + "; ".join(lines)
            if lines
            else "as a TPU computes it (no dot or convolution whose precision differs from the host's)"
        )
        return run, how
    wide = oracle_dtype(closed)
    rw = _Rewrite("oracle", wide)
    jitted = jax.jit(lambda *xs: evaluate(closed.jaxpr, closed.consts, [rw.value(x) for x in xs], rw))

    def run_oracle(*xs):
        if wide == np.float64:
            with jax.enable_x64(True):
                return jax.block_until_ready(jitted(*xs))
        return jitted(*xs)

    how = f"the upcast oracle: every float value in {wide.name}, every dot and convolution at HIGHEST"
    return run_oracle, how


def differs_on_target(fn: Callable, args: tuple) -> list[str]:
    """The dots/convs a TPU computes differently from the host in `fn` (empty: the host's run is the target's)."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(args)
    closed = jax.make_jaxpr(lambda *xs: fn(*jax.tree_util.tree_unflatten(tree, list(xs))))(*leaves)
    return precision_of(closed)
