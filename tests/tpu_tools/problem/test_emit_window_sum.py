"""An average pool's window sum over a kernel value's last axis (49k's matmul epilogue): Mosaic has no
reduce_window, so the emitter writes it as dots with a 0/1 pooling matrix. These tests run the emitted
lines against lax.reduce_window and compile them in a Pallas kernel for a v6e with the real Mosaic."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from maxkernel.tpu_tools.model.flat import flatten
from maxkernel.tpu_tools.problem.emit import body_lines


def _pool(k):
    def f(y):
        return lax.reduce_window(y, jnp.zeros((), y.dtype), lax.add, (1, k), (1, k), "VALID")

    return f


def _lines(f, y):
    program = flatten(f, (y,)).program.model_dump()
    return program, body_lines(program)


def _run(f, y):
    program, lines = _lines(f, y)
    env = {"jnp": jnp, "lax": lax, program["input_names"][0]: y}
    exec("\n".join(lines), env)
    return env[program["outputs"][0]], lines


@pytest.mark.parametrize(
    "shape,k,dtype",
    [
        ((8, 4096), 16, jnp.bfloat16),
        ((16, 256), 16, jnp.bfloat16),
        ((8, 200), 8, jnp.float32),
        ((8, 50), 16, jnp.float32),
    ],
)
def test_window_sums_match_reduce_window(shape, k, dtype):
    """Wide and narrow outputs (4096 / 16 = 256, 256 / 16 = 16), f32 sums, and a width that leaves a partial
    window (50 = 3 x 16 + 2, dropped as VALID drops it)."""
    y = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(dtype)
    got, lines = _run(_pool(k), y)
    text = "\n".join(lines)
    assert "reduce_window" not in text and text.count("dot_general") == 1 and "concatenate" not in text
    want = _pool(k)(y.astype(jnp.float32))  # the exact sums, rounded once to the dtype below
    assert got.shape == want.shape and got.dtype == dtype
    if dtype == jnp.bfloat16:  # f32 sums of bf16 values, rounded once: exact
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want.astype(dtype)))
    else:  # f32 sums in another order
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


def test_a_dropped_window_changes_the_sum():
    """The check above is not blind: a pooling matrix one row short (a window's last element lost) fails."""
    y = jnp.ones((8, 256), jnp.bfloat16)
    program, lines = _lines(_pool(16), y)
    broken = [ln.replace("jnp.int32(16))", "jnp.int32(17))") for ln in lines]
    assert broken != lines
    env = {"jnp": jnp, "lax": lax, program["input_names"][0]: y}
    exec("\n".join(broken), env)
    assert not np.array_equal(np.asarray(env[program["outputs"][0]]), np.full((8, 16), 16.0))


@pytest.mark.parametrize("window", [(2, 16), (1, 1)])
def test_other_windows_stay_reduce_window(window):
    """A window over rows, or of width 1, is not this rewrite's (it stays as traced)."""
    y = jnp.ones((8, 256), jnp.float32)
    _, lines = _lines(
        lambda v: lax.reduce_window(v, jnp.zeros((), v.dtype), lax.add, window, window, "VALID"), y
    )
    assert any("lax.reduce_window(" in ln for ln in lines)


def test_the_window_sum_compiles_in_a_v6e_kernel():
    """The emitted lines inside a Pallas body: the real Mosaic compile for a v6e (compile only)."""
    from jax.experimental import pallas as pl
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    y = jnp.ones((256, 4096), jnp.bfloat16)
    program, lines = _lines(_pool(16), y)
    src = "def kernel(y_ref, o_ref):\n    x = y_ref[...]\n"
    src = src.replace("x =", f"{program['input_names'][0]} =")
    src += "".join(f"    {ln}\n" for ln in lines) + f"    o_ref[...] = {program['outputs'][0]}\n"
    env = {"jnp": jnp, "lax": lax}
    exec(src, env)

    def pooled(v):
        return pl.pallas_call(
            env["kernel"],
            out_shape=jax.ShapeDtypeStruct((256, 256), jnp.bfloat16),
            grid=(2,),
            in_specs=[pl.BlockSpec((128, 4096), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((128, 256), lambda i: (i, 0)),
        )(v)

    topo = topologies.get_topology_desc("v6e:2x2", "tpu")
    sharding = NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())
    arg = jax.ShapeDtypeStruct((256, 4096), jnp.bfloat16, sharding=sharding)
    compiled = jax.jit(pooled).trace(arg).lower().compile()
    assert "tpu_custom_call" in compiled.as_text()
