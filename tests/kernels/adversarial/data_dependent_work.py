"""Estimate adversaries: work that only the inputs' values decide, both ways. `hides_in_prefetch_loop`
repeats its matmul as many times as a scalar-prefetch count says (a while loop the traced shapes cannot
bound: counted once, it costs 1/N of the work). `dynamic_grid_one_step` and `when_skips_all_but_one` are
bounded huge (a run-time grid axis as long as a prefetched table of row blocks; a pl.when on a prefetched
count over a long grid) but do one step of work on the real inputs. Their inputs are
data_dependent_reference.py's (count = REPEATS, active = 1); each `honest_*` kernel does the same work with
the counts written into the program, so the estimate of one must equal the other's."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE = 512


def hides_in_prefetch_loop(x, w, count, order, active):
    """Each [TILE, d] row block times w, `count[0]` times over (x @ w^count), in a while loop."""
    del order, active
    rows, d = x.shape

    def kernel(count_ref, x_ref, w_ref, o_ref):
        def body(_, acc):  # [TILE, d] @ [d, d]
            return jnp.dot(acc, w_ref[...], preferred_element_type=jnp.float32).astype(acc.dtype)

        o_ref[...] = jax.lax.fori_loop(0, count_ref[0], body, x_ref[...])

    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(rows // TILE,),
            in_specs=[
                pl.BlockSpec((TILE, d), lambda i, c: (i, 0)),  # x is (rows, d): row block i
                pl.BlockSpec((d, d), lambda i, c: (0, 0)),  # w: the whole matrix, fetched once
            ],
            out_specs=pl.BlockSpec((TILE, d), lambda i, c: (i, 0)),
        ),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        name="hides_in_prefetch_loop",
    )(count, x, w)


def honest_static_loop(x, w, repeats):
    """The same work with the repeat count written into the program (a scan of known length)."""
    rows, d = x.shape

    def kernel(x_ref, w_ref, o_ref):
        def body(_, acc):
            return jnp.dot(acc, w_ref[...], preferred_element_type=jnp.float32).astype(acc.dtype)

        o_ref[...] = jax.lax.fori_loop(0, repeats, body, x_ref[...])

    return pl.pallas_call(
        kernel,
        grid=(rows // TILE,),
        in_specs=[pl.BlockSpec((TILE, d), lambda i: (i, 0)), pl.BlockSpec((d, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((TILE, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        name="honest_static_loop",
    )(x, w)


def _matmul_rows(x_ref, w_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def dynamic_grid_one_step(x, w, count, order, active):
    """x @ w on the row blocks `order[:active[0]]`: a run-time grid axis as long as the table allows."""
    del count
    _, d = x.shape

    def block(i, order_ref):  # x and out are (rows, d): row block order[i]
        return (order_ref[i], 0)

    return pl.pallas_call(
        lambda o_ref_, x_ref, w_ref, o_ref: _matmul_rows(x_ref, w_ref, o_ref),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(active[0],),  # traced: the grid's length is data
            in_specs=[pl.BlockSpec((TILE, d), block), pl.BlockSpec((d, d), lambda i, o: (0, 0))],
            out_specs=pl.BlockSpec((TILE, d), block),
        ),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        name="dynamic_grid_one_step",
    )(order, x, w)


def when_skips_all_but_one(x, w, count, order, active):
    """x @ w on the row blocks below `active[0]`; every other step of the (rows / TILE)-step grid skips
    its work and re-reads the last active block (its index stops moving)."""
    del count, order
    return _when_first(x, w, active, "when_skips_all_but_one")


def honest_when_first_step(x, w):
    """The same grid with the active count written into the program (a predicate of the program id)."""
    return _when_first(x, w, None, "honest_when_first_step")


def _when_first(x, w, active, name):
    rows, d = x.shape

    def kernel(a_ref, x_ref, w_ref, o_ref):
        @pl.when(pl.program_id(0) < (a_ref[0] if active is not None else 1))
        def _work():
            _matmul_rows(x_ref, w_ref, o_ref)

    def last_active(i, a):  # x and out are (rows, d): row block min(i, active - 1)
        return (jnp.minimum(i, (a[0] if active is not None else 1) - 1), 0)

    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(rows // TILE,),
            in_specs=[pl.BlockSpec((TILE, d), last_active), pl.BlockSpec((d, d), lambda i, a: (0, 0))],
            out_specs=pl.BlockSpec((TILE, d), last_active),
        ),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        name=name,
    )(active if active is not None else jnp.ones((1,), jnp.int32), x, w)


def honest_one_step(x, w):
    """The work the two above really do on the reference's inputs: one row block, one step."""
    _, d = x.shape
    return pl.pallas_call(
        _matmul_rows,
        grid=(1,),
        in_specs=[pl.BlockSpec((TILE, d), lambda i: (0, 0)), pl.BlockSpec((d, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((TILE, d), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((TILE, d), x.dtype),
        name="honest_one_step",
    )(x, w)
