"""The traced-parallel-grid kernel, wrong (triples instead of doubling): sequential interpretation of a
traced parallel axis must still catch a wrong answer."""

from traced_parallel_grid import TILE, jax, jnp, pl, pltpu


def _triple(x_ref, zeros_ref, o_ref):
    del zeros_ref
    o_ref[...] = 3 * x_ref[...]


def workload(x, n_valid):
    rows, cols = x.shape
    return pl.pallas_call(
        _triple,
        grid=(n_valid[0] // TILE,),
        in_specs=[pl.BlockSpec((TILE, cols), lambda i: (i, 0)), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((TILE, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={1: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, jnp.zeros_like(x))
