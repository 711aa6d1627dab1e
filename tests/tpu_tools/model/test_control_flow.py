"""Control flow in a model step: cond, switch, scan, while, fori, associative scans, remat and nested jit are
written as plain JAX (each body a local function) that computes the step bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from maxkernel.tpu_tools.model.flat import evaluate, flatten
from maxkernel.tpu_tools.model.regions import instances, merge
from maxkernel.tpu_tools.problem.emit import body_lines, unsupported_ops


def _step(x, i):
    a = lax.cond(i > 0, lambda x: x * 2, lambda x: x + 1, x)
    b = lax.switch(i, [lambda x: x * 2, lambda x: x + 1, lambda x: -x], x)
    c, ys = lax.scan(lambda c, x: (c + x * a[0], jnp.sin(c * x)), x[0], x)  # a closed-over operand
    c2, _ = lax.scan(lambda c, _: (c * 1.01, None), c, None, length=5)
    w = lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5 + b), (0, x))
    z = lax.associative_scan(jnp.add, x, axis=0)
    f = lax.fori_loop(0, 3, lambda k, v: v + k * x, x)
    r = jax.checkpoint(lambda y: jnp.tanh(y))(f)
    return a, b, c, ys, c2, w, z, jax.jit(lambda y: y @ y.T)(r)


def _source(flat) -> str:
    prog = flat.program.model_dump()
    outs = ", ".join(o[4:] if o.startswith("lit:") else o for o in flat.program.outputs)
    lines = "\n".join("    " + ln for ln in body_lines(prog, mosaic=False))
    return f"def run({', '.join(flat.program.input_names)}):\n{lines}\n    return ({outs},)\n"


def test_control_flow_is_written_as_plain_jax_and_computes_the_step_bit_for_bit():
    args = (jnp.arange(12.0).reshape(4, 3) / 7, jnp.int32(1))
    flat = flatten(_step, args)
    prog = flat.program.model_dump()
    assert unsupported_ops(prog, mosaic=False) == []
    assert {"cond", "scan", "while"} <= set(unsupported_ops(prog, mosaic=True))  # never in a Pallas body
    src = _source(flat)
    assert "lax.switch(" in src and "lax.scan(" in src and "lax.while_loop(" in src
    ns = {"jax": jax, "jnp": jnp, "lax": lax, "np": np}
    exec(src, ns)  # noqa: S102  (the emitter's own output)
    for run, want in (
        (ns["run"], evaluate(flat, list(args))),
        (jax.jit(ns["run"]), jax.jit(lambda *a: evaluate(flat, a))(*args)),
    ):
        got = run(*args)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
    # a dropped branch or body is not the same step: the check above can fail
    bad = src.replace("lax.mul(v5, jnp.asarray(2.0", "lax.mul(v5, jnp.asarray(2.5")
    assert bad != src
    exec(bad, ns)
    assert np.asarray(ns["run"](*args)[0]).tobytes() != np.asarray(evaluate(flat, list(args))[0]).tobytes()


def test_a_recurrence_stays_one_scan_and_is_its_own_region_kind():
    def step(x):  # a time recurrence of 200 steps and a 3-layer stack (matmuls): only the stack unrolls
        h, _ = lax.scan(lambda h, xt: (0.9 * h + xt, None), jnp.zeros(x.shape[1:]), x)
        w = jnp.stack([jnp.eye(8)] * 3)
        y, _ = lax.scan(lambda y, wl: (jnp.tanh(y @ wl), None), x[:, :8], w)
        return h, y

    flat = flatten(step, (jax.ShapeDtypeStruct((200, 8), jnp.float32),))
    prims = [e.primitive for e in flat.equations]
    assert prims.count("scan") == 1 and prims.count("dot_general") == 3
    kinds = {r.kind for r in merge(flat, instances(flat))}
    assert "recurrence" in kinds
