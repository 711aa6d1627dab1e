"""Hides its work in a fori_loop: the compiled loop body is one row-group's bundles, so an estimate that
counts each bundle once charges 1/N of the work. `once` does the same work (tanh of every row, summed
over the N row groups) without a loop; `looped` walks the N row groups with lax.fori_loop."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

LANES = 512
STEPS = 4  # grid steps


def _call(kernel, x, rows, name):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8 * STEPS, LANES), jnp.float32),
        grid=(STEPS,),
        in_specs=[pl.BlockSpec((rows, LANES), lambda g: (g, 0))],
        out_specs=pl.BlockSpec((8, LANES), lambda g: (g, 0)),
        name=name,
    )(x)


def looped(x):
    """x: f32[STEPS * 8 * n, LANES]; each step sums tanh(row group) * 1.5 over its n row groups in a loop."""
    rows = x.shape[0] // STEPS
    n = rows // 8

    def kernel(x_ref, o_ref):
        def body(i, acc):
            return acc + jnp.tanh(x_ref[pl.ds(pl.multiple_of(i * 8, 8), 8), :]) * 1.5

        o_ref[...] = jax.lax.fori_loop(0, n, body, jnp.zeros((8, LANES), jnp.float32))

    return _call(kernel, x, rows, f"looped{n}")


def once(x):
    """The same result and work as `looped`, written without a loop."""
    rows = x.shape[0] // STEPS
    n = rows // 8

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum((jnp.tanh(x_ref[...]) * 1.5).reshape(n, 8, LANES), axis=0)

    return _call(kernel, x, rows, f"once{n}")


def dynamic(x):
    """A loop whose trip count depends on the grid step (a while loop): the dump states no bound."""
    rows = x.shape[0] // STEPS
    n = rows // 8

    def kernel(x_ref, o_ref):
        def body(i, acc):
            return acc + jnp.tanh(x_ref[pl.ds(pl.multiple_of(i * 8, 8), 8), :]) * 1.5

        hi = n - pl.program_id(0)
        o_ref[...] = jax.lax.fori_loop(0, hi, body, jnp.zeros((8, LANES), jnp.float32))

    return _call(kernel, x, rows, f"dynamic{n}")


def single_step(x):
    """One grid step (no grid loop in the compiled kernel): the fori_loop is the only loop."""
    n = x.shape[0] // 8

    def kernel(x_ref, o_ref):
        def body(i, acc):
            return acc + jnp.tanh(x_ref[pl.ds(pl.multiple_of(i * 8, 8), 8), :]) * 1.5

        o_ref[...] = jax.lax.fori_loop(0, n, body, jnp.zeros((8, LANES), jnp.float32))

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, LANES), jnp.float32),
        in_specs=[pl.BlockSpec((x.shape[0], LANES), lambda: (0, 0))],
        out_specs=pl.BlockSpec((8, LANES), lambda: (0, 0)),
        name=f"single{n}",
    )(x)
