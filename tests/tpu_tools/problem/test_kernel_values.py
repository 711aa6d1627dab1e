"""The largest value a kernel body builds, read from the traced jaxpr: what the pre-compile VMEM check sees."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from maxkernel.tpu_tools.problem.kernel_values import largest_kernel_value, value_over_vmem

X = jax.ShapeDtypeStruct((8, 128), jnp.float32)


def _call(body, scratch=()):
    from jax.experimental.pallas import tpu as pltpu

    def f(x):
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            scratch_shapes=[pltpu.VMEM(s, jnp.float32) for s in scratch],
            name="probe",
        )(x)

    return jax.jit(f).trace(X).jaxpr


def test_a_used_value_is_found_with_its_shape_bytes_and_line():
    def body(x_ref, o_ref):
        big = jnp.broadcast_to(x_ref[0:1, 0:1], (4096, 8192))
        o_ref[...] = x_ref[...] + jnp.sum(big)

    v = largest_kernel_value(_call(body))
    assert v is not None and v.shape == (4096, 8192) and v.nbytes == 4096 * 8192 * 4
    assert v.kernel == "probe" and v.line is not None and v.file.endswith("test_kernel_values.py")
    assert value_over_vmem(_call(body), 64 * 2**20) is not None  # 128 MiB > 64 MiB
    assert value_over_vmem(_call(body), 128 * 2**20) is None  # equal fits: only larger is refused


def test_a_value_hidden_in_a_loop_or_a_branch_is_still_found():
    def in_loop(x_ref, o_ref):
        def step(i, acc):
            return acc + jnp.sum(jnp.broadcast_to(x_ref[0:1, 0:1], (8192, 8192)))

        o_ref[...] = x_ref[...] + jax.lax.fori_loop(0, 2, step, 0.0)

    def in_branch(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] += jnp.sum(jnp.broadcast_to(x_ref[0:1, 0:1], (8192, 8192)))

    for body in (in_loop, in_branch):
        v = largest_kernel_value(_call(body))
        assert v is not None and v.shape == (8192, 8192), body.__name__


def test_a_dead_value_and_a_scratch_ref_are_not_values_the_body_holds():
    def body(x_ref, o_ref, big_ref):
        _dead = jnp.broadcast_to(x_ref[0:1, 0:1], (8192, 8192))  # nothing reads it: the compiler drops it
        big_ref[0:8, 0:128] = x_ref[...]  # a scratch ref: its size is the compiler's verdict, not ours
        o_ref[...] = big_ref[0:8, 0:128] * 2.0

    v = largest_kernel_value(_call(body, scratch=[(16384, 16384)]))
    assert v is not None and v.nbytes == 8 * 128 * 4


def test_plain_jax_has_no_kernel_value():
    assert (
        largest_kernel_value(jax.jit(lambda x: jnp.broadcast_to(x, (8192, 8, 128)).sum(0)).trace(X).jaxpr)
        is None
    )


def test_vreg_tiles_follow_mosaics_layout_of_the_last_two_dims():
    from maxkernel.tpu_tools.problem.kernel_values import _tiles

    assert _tiles((512, 2048), 4) == 64 * 16  # dense f32: 8 rows x 128 lanes per tile
    assert _tiles((512, 2048), 2) == 32 * 16  # bf16 packs 16 rows per tile
    assert _tiles((64, 8192, 1, 1), 4) == 64 * 8192  # trailing unit dims: one tile per element
    assert _tiles((4096,), 4) == 4 and _tiles((), 4) == 1


def test_a_value_with_trailing_unit_dims_is_over_the_tile_budget_though_it_is_small():
    from maxkernel.tpu_tools.problem.kernel_values import value_over_tile_budget

    def body(x_ref, o_ref):  # 26k's epilogue: an instance norm over [rows, cols, 1, 1]
        y = x_ref[...].reshape(8, 128, 1, 1)
        y = jnp.broadcast_to(y, (8, 128, 1, 1)) - jnp.sum(y, axis=(2, 3), keepdims=True)
        o_ref[...] = y.reshape(8, 128)

    small = _call(body)
    assert value_over_tile_budget(small) is None  # 1 024 tiles: compiles in seconds
    hit = value_over_tile_budget(small, budget=512)
    assert hit is not None and hit.shape == (8, 128, 1, 1) and hit.tiles == 1024 and hit.nbytes == 4096
