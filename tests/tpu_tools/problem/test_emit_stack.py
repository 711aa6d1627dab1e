"""jnp.stack binds its own primitive: written back as plain JAX (an extracted region, a composed step), never
offered to a Pallas body."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax  # noqa: F401 - the emitted lines use it

from maxkernel.tpu_tools.model.flat import flatten
from maxkernel.tpu_tools.problem.emit import body_lines, unsupported_ops


def test_stack_is_emitted_as_plain_jax_and_refused_for_a_kernel():
    def f(a, b):
        return jnp.stack([a, b * 2], axis=1)

    a, b = jnp.arange(6.0).reshape(2, 3), jnp.ones((2, 3))
    program = flatten(f, (a, b)).program.model_dump()
    assert "stack" in program["census"]
    assert unsupported_ops(program) == ["stack"]  # not in a Pallas body
    assert unsupported_ops(program, mosaic=False) == []
    lines = body_lines(program, mosaic=False)
    env = {"jnp": jnp, "lax": jax.lax, "x0": a, "x1": b}
    exec("\n".join(line.strip() for line in lines), env)
    out = env[program["outputs"][0]]
    np.testing.assert_array_equal(np.asarray(out), np.asarray(f(a, b)))
